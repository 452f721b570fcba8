use super::*;

fn cfg(patterns: &str) -> PresenceConfig {
    let mut c = PresenceConfig {
        max_members: 2,
        max_events: 1,
        ..Default::default()
    };
    c.set_patterns(patterns).unwrap();
    c
}

#[test]
fn a_user_joins_once_and_leaves_with_its_last_connection() {
    let mut p = Presence::default();
    let ana = ("ana", Some(r#"{"n":1}"#));
    assert_eq!(p.join(1, "c", ana, 10), Ok(Joined::User));
    assert_eq!(p.join(2, "c", ana, 10), Ok(Joined::Connection));
    assert_eq!(p.join(2, "c", ana, 10), Ok(Joined::Already));
    assert_eq!(p.count("c"), 1);
    assert_eq!(p.members("c").unwrap()["ana"].connections, 2);
    assert!(p.is_present(1, "c"));
    let left = p.leave(1, "c").unwrap();
    assert!(!left.last, "the second connection is still there");
    assert!(p.leave(1, "c").is_none(), "already left");
    let left = p.close(2);
    assert_eq!(left.len(), 1);
    assert!(left[0].last);
    assert_eq!(left[0].user, "ana");
    assert_eq!(p.count("c"), 0);
    assert!(p.channels.is_empty() && p.conns.is_empty());
    assert_eq!(p.stats.presence_members, 0);
}

#[test]
fn close_leaves_every_channel() {
    let mut p = Presence::default();
    p.join(1, "a", ("u", None), 10).unwrap();
    p.join(1, "b", ("u", None), 10).unwrap();
    p.join(2, "b", ("v", None), 10).unwrap();
    assert_eq!(p.stats.presence_members, 3);
    let mut left: Vec<_> = p
        .close(1)
        .into_iter()
        .map(|l| (l.channel, l.last))
        .collect();
    left.sort();
    assert_eq!(left, [("a".to_string(), true), ("b".to_string(), true)]);
    assert_eq!(p.count("b"), 1);
    assert_eq!(p.entries().count(), 1);
}

#[test]
fn a_full_channel_refuses_new_users_but_not_known_ones() {
    let mut p = Presence::default();
    p.join(1, "c", ("a", None), 1).unwrap();
    assert_eq!(p.join(2, "c", ("b", None), 1), Err(PresenceError::Full));
    assert!(
        !p.conns.contains_key(&2),
        "a refused connection holds nothing"
    );
    assert_eq!(p.join(3, "c", ("a", None), 1), Ok(Joined::Connection));
    assert_eq!(p.join(4, "d", ("a", None), 0), Err(PresenceError::Full));
    assert!(!p.channels.contains_key("d"));
    assert_eq!(p.stats.presence_refused, 2);
}

#[test]
fn patterns_select_channels() {
    let c = cfg("room-*, lobby");
    assert!(c.enabled());
    assert!(c.covers("room-1") && c.covers("lobby"));
    assert!(!c.covers("lobby2") && !c.covers("news"));
    assert!(cfg("*").covers("anything"));
    assert!(!cfg("").enabled());
    let mut c = PresenceConfig::default();
    assert!(c.set_patterns("a b").is_err());
    let many = vec!["x"; MAX_PATTERNS + 1].join(",");
    assert!(c.set_patterns(&many).is_err());
    assert!(cfg("a").announces(1) && !cfg("a").announces(2));
}

#[test]
fn info_is_a_bounded_object() {
    assert!(valid_info(r#"{"name":"ana"}"#));
    assert!(!valid_info("[1]"));
    let big = format!(r#"{{"x":"{}"}}"#, "y".repeat(MAX_INFO));
    assert!(!valid_info(&big));
}

#[test]
fn events_and_answers_are_json() {
    assert_eq!(
        event::join("c", "u", Some(r#"{"n":1}"#)),
        r#"{"type":"join","channel":"c","user":"u","info":{"n":1}}"#
    );
    assert_eq!(
        event::leave("c", "u"),
        r#"{"type":"leave","channel":"c","user":"u"}"#
    );
    let id: Box<RawValueBox> = serde_json::from_str("7").unwrap();
    let rows = [("u", Some("{}"), 2), ("v", None, 1)];
    assert_eq!(
        event::answer("c", Some(&rows), 2, Some(&id)),
        r#"{"type":"presence","channel":"c","members":[{"user":"u","info":{},"connections":2},{"user":"v","connections":1}],"count":2,"id":7}"#
    );
    assert_eq!(
        event::answer("c", None, 5, None),
        r#"{"type":"presence","channel":"c","count":5}"#
    );
    assert_eq!(events_channel("c"), "presence/c");
    // Redis's prune script completes the head with the user as a string.
    let head = event::leave_head("c");
    assert_eq!(format!(r#"{head}"u"}}"#), event::leave("c", "u"));
}

type RawValueBox = serde_json::value::RawValue;
