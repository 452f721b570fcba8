use super::*;
use crate::auth::{sign_token, AuthConfig};
use crate::secret::Secret;

const SECRET: &str = "0123456789abcdef0123456789abcdef";

fn rules() -> Rules {
    Rules {
        publish: Publish::Clients,
        subscribe: Subscribe::Token,
        allow_anonymous: false,
        presence: None,
        history: HistoryLimits::default(),
        recover_on_subscribe: false,
        conflate: false,
        delta: false,
        delta_publish: false,
        presence_limits: (1000, 100),
        compression: true,
        max_message_size: 1 << 20,
        subscribe_proxy: Proxy::Global,
        publish_proxy: Proxy::Global,
    }
}

fn table(named: Vec<(&str, Rules)>) -> Table {
    let named = named.into_iter().map(|(n, r)| (n.to_string(), r)).collect();
    Table::new(rules(), named)
}

/// The grants of a real HS256 token with these claims.
fn token(claims: &str) -> Grants {
    let cfg = AuthConfig {
        token_secret: Some(Secret(SECRET.into())),
        ..Default::default()
    };
    cfg.verify(sign_token(claims, SECRET.as_bytes()).as_bytes())
        .expect("valid token")
}

#[test]
fn without_namespaces_a_colon_means_nothing() {
    let t = Table::default();
    assert!(t.is_empty());
    assert_eq!(t.find("chat:room"), Some(Ns::Default));
    assert_eq!(t.may_subscribe(&Grants::All, false, "x:y"), Ok(()));
    let reader = Grants::read_only();
    let e = t.may_publish(&reader, ("x:y", 1), true).unwrap_err();
    assert_eq!(e.status(), 403);
    assert_eq!(t.server_may_publish("x:y", usize::MAX), Ok(()));
}

#[test]
fn a_channel_is_in_the_namespace_before_its_first_colon() {
    let t = table(vec![("chat", rules()), ("feed", rules())]);
    assert_eq!(t.find("chat:room:1"), Some(Ns::Named(0)));
    assert_eq!(t.find("feed:x"), Some(Ns::Named(1)));
    assert_eq!(t.find("plain"), Some(Ns::Default));
    assert_eq!(t.find("other:x"), None);
    assert_eq!(t.find(":x"), None, "an empty namespace is not the default");
    let e = t.may_subscribe(&Grants::All, false, "other:x").unwrap_err();
    assert_eq!((e, e.status()), (Refusal::UnknownChannel, 404));
    let e = t.server_may_publish("other:x", 1).unwrap_err();
    assert_eq!(e, Refusal::UnknownChannel);
}

#[test]
fn publish_rules() {
    let server = Rules {
        publish: Publish::Server,
        max_message_size: 10,
        ..rules()
    };
    let subs = Rules {
        publish: Publish::Subscribers,
        ..rules()
    };
    let t = table(vec![("feed", server), ("room", subs)]);
    let reader = token(r#"{"exp":9999999999,"subscribe":["*"],"publish":[]}"#);
    assert!(t.may_publish(&Grants::All, ("feed:x", 1), true).is_err());
    assert_eq!(t.server_may_publish("feed:x", 10), Ok(()));
    assert_eq!(t.server_may_publish("feed:x", 11), Err(Refusal::TooLarge));
    assert_eq!(t.may_publish(&reader, ("room:x", 1), true), Ok(()));
    assert!(t.may_publish(&reader, ("room:x", 1), false).is_err());
    assert!(t.may_publish(&reader, ("plain", 1), true).is_err());
}

#[test]
fn subscribe_rules_anyone_token_user_and_anonymous() {
    let anyone = Rules {
        subscribe: Subscribe::Anyone,
        allow_anonymous: true,
        ..rules()
    };
    let user = Rules {
        subscribe: Subscribe::User,
        ..rules()
    };
    let t = table(vec![("pub", anyone), ("me", user), ("tok", rules())]);
    let alice = token(r#"{"exp":9999999999,"sub":"42","subscribe":["tok:a"]}"#);
    assert_eq!(t.may_subscribe(&alice, true, "pub:x"), Ok(()));
    assert_eq!(t.may_subscribe(&alice, true, "tok:a"), Ok(()));
    assert!(t.may_subscribe(&alice, true, "tok:b").is_err());
    assert_eq!(t.may_subscribe(&alice, true, "me:#42"), Ok(()));
    assert!(t.may_subscribe(&alice, true, "me:#43").is_err());
    assert!(t.may_subscribe(&alice, true, "me:#").is_err());
    assert!(t.may_subscribe(&alice, true, "me:plain").is_err());
    let anonymous = Grants::read_only();
    assert!(t.any_anonymous());
    assert_eq!(t.may_subscribe(&anonymous, true, "pub:x"), Ok(()));
    assert!(t.may_subscribe(&anonymous, true, "tok:a").is_err());
    assert!(t.may_subscribe(&anonymous, true, "plain").is_err());
    assert!(
        t.may_subscribe(&anonymous, false, "plain").is_ok(),
        "no tokens: grants decide"
    );
    assert!(t.may_publish(&anonymous, ("pub:x", 1), true).is_err());
}

#[test]
fn user_channels_belong_to_what_follows_the_last_hash() {
    assert_eq!(user_of("notifications:#42"), Some("42"));
    assert_eq!(user_of("a:b#c#d"), Some("d"));
    assert_eq!(user_of("a:#"), None);
    assert_eq!(user_of("a:b"), None);
}
