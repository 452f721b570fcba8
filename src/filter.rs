//! Publication tags and tag filters, sans-I/O.
//!
//! A publication may carry **tags**: a flat map of string keys to string
//! values (`{"ticker":"BTC","price":"50100"}`), at most [`MAX_TAGS`] of
//! them and [`MAX_TAG_BYTES`] in all. A subscription may carry a
//! **filter**: a tree in Centrifugo's shape, so its clients' filters work
//! as they are:
//!
//! ```json
//! {"op":"and","nodes":[
//!   {"key":"ticker","cmp":"in","vals":["BTC","ETH"]},
//!   {"op":"not","nodes":[{"key":"price","cmp":"lt","val":"100"}]}
//! ]}
//! ```
//!
//! An inner node has `op` `and`, `or` (at least one child) or `not`
//! (exactly one) and its `nodes`; a leaf has a `key`, a `cmp` and, as the
//! comparison needs, a `val` or `vals`. Comparisons: `eq`, `neq`, `in`,
//! `nin` (`vals`), `ex`, `nex` (the key is present or not; no value),
//! `sw`, `ew`, `ct` (starts with, ends with, contains), `gt`, `gte`,
//! `lt`, `lte` (numbers: both sides read as decimal numbers; a tag that is
//! not a number never matches them). A missing key matches only `neq`,
//! `nin` and `nex`. A filter has at most [`MAX_DEPTH`] levels and
//! [`MAX_NODES`] nodes; anything else is refused with the reason.
//!
//! [`Filter::matches`] runs once per subscriber per publication: it
//! walks the flattened tree and looks tags up by binary search, and never
//! allocates (numbers were read when the filter was parsed, and a tag's
//! when the publication's tags were: once per publication).

use std::fmt;

use serde_json::Value;

/// Most tags one publication carries.
pub const MAX_TAGS: usize = 16;
/// Most bytes of a publication's tags, keys and values together.
pub const MAX_TAG_BYTES: usize = 1024;
/// Most levels of a filter tree (a leaf alone is one).
pub const MAX_DEPTH: usize = 8;
/// Most nodes of a filter tree.
pub const MAX_NODES: usize = 32;
/// Most values of an `in` or `nin` leaf.
pub const MAX_VALS: usize = 64;
/// Longest key or value in a filter or a tag.
pub const MAX_TEXT: usize = 256;

/// Why tags or a filter were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterError {
    /// Not the expected JSON shape (the reason says where).
    Shape(&'static str),
    /// An `op` or a `cmp` that does not exist.
    Unknown(&'static str),
    /// Over a bound (which one).
    TooLarge(&'static str),
}

impl FilterError {
    /// The reason alone (a static text for an HTTP answer).
    pub fn reason(&self) -> &'static str {
        match self {
            FilterError::Shape(what) | FilterError::Unknown(what) | FilterError::TooLarge(what) => {
                what
            }
        }
    }
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilterError::Shape(what) => write!(f, "bad filter or tags: {what}"),
            FilterError::Unknown(what) => write!(f, "unknown {what}"),
            FilterError::TooLarge(what) => write!(f, "too large: {what}"),
        }
    }
}

/// A publication's tags, sorted by key (looked up by binary search), each
/// value's number read once (for `gt`, `gte`, `lt`, `lte`), not once per
/// subscriber.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tags {
    tags: Vec<Tag>,
    /// The tags as compact JSON, keys sorted: what frames, the mesh and
    /// Redis carry (written once per publication).
    json: String,
}

// Numbers are read from the values (finite only), so equal values mean
// equal numbers: equality is an equivalence.
impl Eq for Tags {}

/// No tags: what a filter sees of a publication without any.
static NO_TAGS: Tags = Tags {
    tags: Vec::new(),
    json: String::new(),
};

#[derive(Debug, Clone, PartialEq)]
struct Tag {
    key: Box<str>,
    value: Box<str>,
    number: Option<f64>,
}

impl Tags {
    /// Reads tags from their JSON text.
    pub fn parse(json: &[u8]) -> Result<Tags, FilterError> {
        let v: Value = serde_json::from_slice(json).map_err(|_| FilterError::Shape("not JSON"))?;
        Tags::from_json(&v)
    }

    /// Reads tags from a JSON object of strings, within the bounds.
    pub fn from_json(v: &Value) -> Result<Tags, FilterError> {
        let obj = v
            .as_object()
            .ok_or(FilterError::Shape("tags must be an object"))?;
        if obj.len() > MAX_TAGS {
            return Err(FilterError::TooLarge("more than 16 tags"));
        }
        let mut pairs = Vec::with_capacity(obj.len());
        for (k, v) in obj {
            let v = v
                .as_str()
                .ok_or(FilterError::Shape("a tag's value must be a string"))?;
            pairs.push((k.as_str(), v));
        }
        Tags::from_pairs(pairs)
    }

    /// Tags from `(key, value)` pairs (a query string's `tag.KEY=VALUE`),
    /// within the bounds; a key given twice is refused.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Tags, FilterError> {
        let mut bytes = 0;
        let mut out: Vec<Tag> = Vec::new();
        for (k, v) in pairs {
            if out.len() == MAX_TAGS {
                return Err(FilterError::TooLarge("more than 16 tags"));
            }
            if k.is_empty() {
                return Err(FilterError::Shape("a tag's key must not be empty"));
            }
            bytes += k.len() + v.len();
            if bytes > MAX_TAG_BYTES {
                return Err(FilterError::TooLarge("tags over 1 KiB"));
            }
            let number = v.parse::<f64>().ok().filter(|n| n.is_finite());
            let (key, value) = (Box::from(k), Box::from(v));
            out.push(Tag { key, value, number });
        }
        out.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        if out.windows(2).any(|w| w[0].key == w[1].key) {
            return Err(FilterError::Shape("a tag's key given twice"));
        }
        let json = tags_json(&out);
        Ok(Tags { tags: out, json })
    }

    /// No tags (a publication without any, as filters see it).
    pub fn none() -> &'static Tags {
        &NO_TAGS
    }

    /// The tags as compact JSON text, keys sorted.
    pub fn json(&self) -> &str {
        &self.json
    }

    fn find(&self, key: &str) -> Option<&Tag> {
        let i = self.tags.binary_search_by(|t| (*t.key).cmp(key)).ok()?;
        Some(&self.tags[i])
    }

    /// The value of `key`, if the publication has it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.find(key).map(|t| &*t.value)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tags.is_empty()
    }

    /// The tags as a JSON object.
    pub fn to_json(&self) -> Value {
        let map = self.tags.iter();
        let map = map.map(|t| (t.key.to_string(), Value::from(&*t.value)));
        Value::Object(map.collect())
    }
}

fn tags_json(tags: &[Tag]) -> String {
    let map = tags.iter();
    let map = map.map(|t| (t.key.to_string(), Value::from(&*t.value)));
    let map: serde_json::Map<String, Value> = map.collect();
    serde_json::to_string(&map).expect("a map of strings serializes")
}

/// Whether a publication with `tags` (`None`: it has none) passes every
/// filter of `filters` (a subscription's: the server's, then its own).
pub fn all_match(filters: &[Filter], tags: Option<&Tags>) -> bool {
    let tags = tags.unwrap_or(&NO_TAGS);
    filters.iter().all(|f| f.matches(tags))
}

/// A comparison of a leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmp {
    Eq,
    Neq,
    In,
    Nin,
    Ex,
    Nex,
    Sw,
    Ew,
    Ct,
    Gt,
    Gte,
    Lt,
    Lte,
}

impl Cmp {
    fn parse(s: &str) -> Option<Cmp> {
        Some(match s {
            "eq" => Cmp::Eq,
            "neq" => Cmp::Neq,
            "in" => Cmp::In,
            "nin" => Cmp::Nin,
            "ex" => Cmp::Ex,
            "nex" => Cmp::Nex,
            "sw" => Cmp::Sw,
            "ew" => Cmp::Ew,
            "ct" => Cmp::Ct,
            "gt" => Cmp::Gt,
            "gte" => Cmp::Gte,
            "lt" => Cmp::Lt,
            "lte" => Cmp::Lte,
            _ => return None,
        })
    }
}

/// One node of the flattened tree; children are the nodes
/// `first..first + count`.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    And {
        first: u8,
        count: u8,
    },
    Or {
        first: u8,
        count: u8,
    },
    Not {
        child: u8,
    },
    Leaf {
        key: Box<str>,
        cmp: Cmp,
        val: Operand,
    },
}

/// What a leaf compares with.
#[derive(Debug, Clone, PartialEq)]
enum Operand {
    None,
    Text(Box<str>),
    Texts(Box<[Box<str>]>),
    Number(f64),
}

/// A parsed filter: its nodes, the root first.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    nodes: Vec<Node>,
}

// Its numbers are finite (parsing refuses others): equality is an
// equivalence.
impl Eq for Filter {}

impl Filter {
    /// Reads a filter from its JSON text.
    pub fn parse(json: &[u8]) -> Result<Filter, FilterError> {
        let v: Value = serde_json::from_slice(json).map_err(|_| FilterError::Shape("not JSON"))?;
        Filter::from_json(&v)
    }

    /// Reads a filter tree, within the bounds.
    pub fn from_json(v: &Value) -> Result<Filter, FilterError> {
        let mut count = 0;
        check(v, 1, &mut count)?;
        let mut nodes = Vec::with_capacity(count);
        nodes.push(Node::Not { child: 0 }); // the root's place
        nodes[0] = node(v, &mut nodes)?;
        Ok(Filter { nodes })
    }

    /// Whether a publication with `tags` passes.
    pub fn matches(&self, tags: &Tags) -> bool {
        self.eval(0, tags)
    }

    fn eval(&self, i: usize, tags: &Tags) -> bool {
        match &self.nodes[i] {
            Node::And { first, count } => {
                let r = *first as usize..(*first + *count) as usize;
                r.into_iter().all(|c| self.eval(c, tags))
            }
            Node::Or { first, count } => {
                let r = *first as usize..(*first + *count) as usize;
                r.into_iter().any(|c| self.eval(c, tags))
            }
            Node::Not { child } => !self.eval(*child as usize, tags),
            Node::Leaf { key, cmp, val } => leaf(tags.find(key), *cmp, val),
        }
    }
}

fn leaf(tag: Option<&Tag>, cmp: Cmp, val: &Operand) -> bool {
    let Some(t) = tag else {
        return matches!(cmp, Cmp::Neq | Cmp::Nin | Cmp::Nex);
    };
    let tag = &*t.value;
    match (cmp, val) {
        (Cmp::Ex, _) => true,
        (Cmp::Nex, _) => false,
        (Cmp::Eq, Operand::Text(v)) => tag == &**v,
        (Cmp::Neq, Operand::Text(v)) => tag != &**v,
        (Cmp::In, Operand::Texts(vs)) => vs.iter().any(|v| tag == &**v),
        (Cmp::Nin, Operand::Texts(vs)) => !vs.iter().any(|v| tag == &**v),
        (Cmp::Sw, Operand::Text(v)) => tag.starts_with(&**v),
        (Cmp::Ew, Operand::Text(v)) => tag.ends_with(&**v),
        (Cmp::Ct, Operand::Text(v)) => tag.contains(&**v),
        (cmp, Operand::Number(n)) => {
            let Some(t) = t.number else {
                return false;
            };
            match cmp {
                Cmp::Gt => t > *n,
                Cmp::Gte => t >= *n,
                Cmp::Lt => t < *n,
                _ => t <= *n,
            }
        }
        _ => false,
    }
}

/// Checks the shape's bounds before anything is built: depth and count.
fn check(v: &Value, depth: usize, count: &mut usize) -> Result<(), FilterError> {
    if depth > MAX_DEPTH {
        return Err(FilterError::TooLarge("filter deeper than 8 levels"));
    }
    *count += 1;
    if *count > MAX_NODES {
        return Err(FilterError::TooLarge("filter over 32 nodes"));
    }
    let obj = v
        .as_object()
        .ok_or(FilterError::Shape("a filter node must be an object"))?;
    if let Some(nodes) = obj.get("nodes") {
        let nodes = nodes
            .as_array()
            .ok_or(FilterError::Shape("nodes must be an array"))?;
        for n in nodes {
            check(n, depth + 1, count)?;
        }
    }
    Ok(())
}

/// Builds node `v`; its children are appended to `nodes` first.
fn node(v: &Value, nodes: &mut Vec<Node>) -> Result<Node, FilterError> {
    let obj = v
        .as_object()
        .ok_or(FilterError::Shape("a filter node must be an object"))?;
    let op = match obj.get("op") {
        None => "",
        Some(op) => op
            .as_str()
            .ok_or(FilterError::Shape("op must be a string"))?,
    };
    if op.is_empty() {
        return leaf_node(obj);
    }
    let children = obj
        .get("nodes")
        .and_then(Value::as_array)
        .ok_or(FilterError::Shape("and, or and not need nodes"))?;
    let first = nodes.len();
    // Placeholders, filled in after: the children sit together.
    nodes.extend(children.iter().map(|_| Node::Not { child: 0 }));
    for (i, c) in children.iter().enumerate() {
        nodes[first + i] = node(c, nodes)?;
    }
    let (first, count) = (first as u8, children.len() as u8);
    match op {
        "and" | "or" if count == 0 => Err(FilterError::Shape("and and or need a node")),
        "and" => Ok(Node::And { first, count }),
        "or" => Ok(Node::Or { first, count }),
        "not" if count != 1 => Err(FilterError::Shape("not takes exactly one node")),
        "not" => Ok(Node::Not { child: first }),
        _ => Err(FilterError::Unknown("filter op (and, or, not)")),
    }
}

fn text(v: &Value) -> Result<Box<str>, FilterError> {
    let s = v
        .as_str()
        .ok_or(FilterError::Shape("a value must be a string"))?;
    if s.len() > MAX_TEXT {
        return Err(FilterError::TooLarge("a value over 256 bytes"));
    }
    Ok(Box::from(s))
}

fn leaf_node(obj: &serde_json::Map<String, Value>) -> Result<Node, FilterError> {
    if obj.contains_key("nodes") {
        return Err(FilterError::Shape("a leaf has no nodes"));
    }
    let key = text(
        obj.get("key")
            .ok_or(FilterError::Shape("a leaf needs a key"))?,
    )?;
    let cmp = obj
        .get("cmp")
        .and_then(Value::as_str)
        .ok_or(FilterError::Shape("a leaf needs a cmp"))?;
    let cmp = Cmp::parse(cmp).ok_or(FilterError::Unknown("filter cmp"))?;
    let val = obj.get("val");
    let val = match cmp {
        Cmp::Ex | Cmp::Nex => Operand::None,
        Cmp::In | Cmp::Nin => {
            let vals = obj
                .get("vals")
                .and_then(Value::as_array)
                .ok_or(FilterError::Shape("in and nin need vals"))?;
            if vals.len() > MAX_VALS {
                return Err(FilterError::TooLarge("more than 64 vals"));
            }
            let vals: Result<Vec<Box<str>>, FilterError> = vals.iter().map(text).collect();
            Operand::Texts(vals?.into_boxed_slice())
        }
        Cmp::Gt | Cmp::Gte | Cmp::Lt | Cmp::Lte => {
            let v = text(val.ok_or(FilterError::Shape("a comparison needs a val"))?)?;
            let n = v
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite())
                .ok_or(FilterError::Shape(
                    "gt, gte, lt and lte need a number in val",
                ))?;
            Operand::Number(n)
        }
        _ => Operand::Text(text(
            val.ok_or(FilterError::Shape("a comparison needs a val"))?,
        )?),
    };
    Ok(Node::Leaf { key, cmp, val })
}

#[cfg(test)]
mod tests;
