use serde_json::json;

use super::*;

fn tags(v: Value) -> Tags {
    Tags::from_json(&v).unwrap()
}

fn filter(v: Value) -> Filter {
    Filter::from_json(&v).unwrap()
}

fn refused(v: Value) -> FilterError {
    Filter::from_json(&v).unwrap_err()
}

#[test]
fn every_comparison_matches_as_centrifugo_defines_it() {
    let t = tags(json!({"ticker": "BTC-USD", "price": "50100.5", "side": "buy"}));
    let yes = [
        json!({"key": "ticker", "cmp": "eq", "val": "BTC-USD"}),
        json!({"key": "ticker", "cmp": "neq", "val": "ETH"}),
        json!({"key": "side", "cmp": "in", "vals": ["sell", "buy"]}),
        json!({"key": "side", "cmp": "nin", "vals": ["sell"]}),
        json!({"key": "price", "cmp": "ex"}),
        json!({"key": "volume", "cmp": "nex"}),
        json!({"key": "ticker", "cmp": "sw", "val": "BTC"}),
        json!({"key": "ticker", "cmp": "ew", "val": "USD"}),
        json!({"key": "ticker", "cmp": "ct", "val": "C-U"}),
        json!({"key": "price", "cmp": "gt", "val": "50000"}),
        json!({"key": "price", "cmp": "gte", "val": "50100.5"}),
        json!({"key": "price", "cmp": "lt", "val": "1e5"}),
        json!({"key": "price", "cmp": "lte", "val": "50100.5"}),
        // A missing key: only the negative comparisons hold.
        json!({"key": "volume", "cmp": "neq", "val": "1"}),
        json!({"key": "volume", "cmp": "nin", "vals": ["1"]}),
    ];
    for f in yes {
        assert!(filter(f.clone()).matches(&t), "{f}");
    }
    let no = [
        json!({"key": "ticker", "cmp": "eq", "val": "btc-usd"}),
        json!({"key": "side", "cmp": "in", "vals": []}),
        json!({"key": "price", "cmp": "nex"}),
        json!({"key": "volume", "cmp": "ex"}),
        json!({"key": "volume", "cmp": "eq", "val": ""}),
        json!({"key": "price", "cmp": "gt", "val": "50100.5"}),
        // A tag that is not a number never passes a numeric comparison.
        json!({"key": "ticker", "cmp": "lt", "val": "1"}),
        json!({"key": "ticker", "cmp": "gte", "val": "-1e300"}),
    ];
    for f in no {
        assert!(!filter(f.clone()).matches(&t), "{f}");
    }
}

#[test]
fn and_or_not_combine() {
    let t = tags(json!({"a": "1", "b": "2"}));
    let f = filter(json!({"op": "and", "nodes": [
        {"key": "a", "cmp": "eq", "val": "1"},
        {"op": "or", "nodes": [
            {"key": "b", "cmp": "eq", "val": "3"},
            {"op": "not", "nodes": [{"key": "c", "cmp": "ex"}]}
        ]}
    ]}));
    assert!(f.matches(&t));
    assert!(!f.matches(&tags(json!({"a": "1", "b": "2", "c": "x"}))));
    assert!(!f.matches(&Tags::default()), "no tags: a is missing");
    let or = filter(json!({"op": "or", "nodes": [{"key": "z", "cmp": "ex"}]}));
    assert!(!or.matches(&t));
}

#[test]
fn bad_filters_are_refused_with_their_reason() {
    let leaf = json!({"key": "a", "cmp": "eq", "val": "1"});
    let mut deep = leaf.clone();
    for _ in 0..MAX_DEPTH - 1 {
        deep = json!({"op": "not", "nodes": [deep]});
    }
    assert!(Filter::from_json(&deep).is_ok(), "8 levels");
    let deeper = json!({"op": "not", "nodes": [deep]});
    assert_eq!(
        refused(deeper),
        FilterError::TooLarge("filter deeper than 8 levels")
    );
    let wide: Vec<Value> = (0..MAX_NODES - 1).map(|_| leaf.clone()).collect();
    assert!(Filter::from_json(&json!({"op": "and", "nodes": wide})).is_ok());
    let wider: Vec<Value> = (0..MAX_NODES).map(|_| leaf.clone()).collect();
    assert_eq!(
        refused(json!({"op": "and", "nodes": wider})),
        FilterError::TooLarge("filter over 32 nodes")
    );
    let cases = [
        (json!({"op": "xor", "nodes": [leaf]}), "unknown filter op"),
        (
            json!({"key": "a", "cmp": "like", "val": "1"}),
            "unknown filter cmp",
        ),
        (json!({"key": "a", "cmp": "eq"}), "needs a val"),
        (
            json!({"key": "a", "cmp": "eq", "val": 1}),
            "must be a string",
        ),
        (json!({"key": "a", "cmp": "in", "val": "1"}), "need vals"),
        (
            json!({"key": "a", "cmp": "gt", "val": "x"}),
            "need a number",
        ),
        (json!({"cmp": "eq", "val": "1"}), "needs a key"),
        (json!({"op": "not", "nodes": []}), "exactly one"),
        (json!({"op": "and", "nodes": []}), "need a node"),
        (json!({"op": "and"}), "need nodes"),
        (json!({"op": "and", "nodes": {"a": 1}}), "must be an array"),
        (json!("a"), "must be an object"),
        (
            json!({"key": "a", "cmp": "eq", "val": "x".repeat(257)}),
            "over 256 bytes",
        ),
    ];
    for (f, reason) in cases {
        let e = refused(f.clone()).to_string();
        assert!(e.contains(reason), "{f}: {e}");
    }
}

#[test]
fn tags_are_bounded_and_sorted_for_lookup() {
    let t = tags(json!({"z": "1", "a": "2", "m": "3"}));
    assert_eq!(t.get("a"), Some("2"));
    assert_eq!(t.get("m"), Some("3"));
    assert_eq!(t.get("b"), None);
    assert_eq!(t.to_json(), json!({"a": "2", "m": "3", "z": "1"}));
    let many: serde_json::Map<String, Value> = (0..=MAX_TAGS)
        .map(|i| (format!("k{i}"), json!("v")))
        .collect();
    let e = Tags::from_json(&Value::Object(many)).unwrap_err();
    assert_eq!(e, FilterError::TooLarge("more than 16 tags"));
    let big = json!({"a": "x".repeat(MAX_TAG_BYTES)});
    assert_eq!(
        Tags::from_json(&big).unwrap_err(),
        FilterError::TooLarge("tags over 1 KiB")
    );
    assert!(Tags::from_json(&json!({"a": 1})).is_err());
    assert!(Tags::from_json(&json!({"": "x"})).is_err());
    assert!(Tags::from_json(&json!(["a"])).is_err());
}
