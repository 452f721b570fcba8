//! The configuration's own tests: sources, precedence, errors.

use super::*;
use std::path::PathBuf;

fn no_env(_: &str) -> Option<String> {
    None
}

fn serve(args: &[&str], env: impl Fn(&str) -> Option<String>) -> Config {
    match Config::from_args(args.iter().copied(), env).unwrap() {
        Command::Serve(c) => *c,
        other => panic!("expected serve, got {other:?}"),
    }
}

#[test]
fn defaults_match_the_documented_table() {
    let c = serve(&[], no_env);
    assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(c.ws.max_frame_size, 1 << 20);
    assert_eq!(c.http.max_handshake_bytes, 8 << 10);
    assert_eq!(c.handshake_timeout, Duration::from_secs(10));
    assert_eq!(c.slow_consumer, SlowConsumerPolicy::Disconnect);
    assert!(c.cpu.is_none() && c.root_channel.is_none() && !c.exclude_sender);
}

#[test]
fn flags_override_env_which_overrides_defaults() {
    let env = |k: &str| match k {
        "CORECAST_LISTEN" => Some("0.0.0.0:9000".to_string()),
        "CORECAST_MAX_FRAME_SIZE" => Some("64KiB".to_string()),
        _ => None,
    };
    let c = serve(&["--max-frame-size", "16MiB", "--exclude-sender"], env);
    assert_eq!(c.listen.to_string(), "0.0.0.0:9000");
    assert_eq!(c.ws.max_frame_size, 16 << 20);
    assert!(c.exclude_sender);
    let c = serve(&["serve", "--cpu=1", "--root-channel", "echo"], no_env);
    assert_eq!(c.cpu, Some(1));
    assert_eq!(c.root_channel.as_deref(), Some("echo"));
}

#[test]
fn bad_input_is_a_clear_error() {
    for args in [
        &["--nope"][..],
        &["--listen"],
        &["--listen", "nowhere"],
        &["--max-frame-size", "12XB"],
        &["--max-frame-size", "99999999999999999999GiB"],
        &["--slow-consumer", "maybe"],
        &["--root-channel", "bad name"],
        &["--max-frame-size", "0"],
        &["positional"],
    ] {
        assert!(
            Config::from_args(args.iter().copied(), no_env).is_err(),
            "{args:?} should fail"
        );
    }
}

#[test]
fn help_lists_every_option_with_env_and_default() {
    let h = help_text();
    for o in OPTIONS {
        assert!(h.contains(&format!("--{}", o.flag)), "{}", o.flag);
        assert!(h.contains(o.env), "{}", o.env);
    }
    assert!(h.contains("default 127.0.0.1:8080"));
}

#[test]
fn the_book_documents_every_option_as_generated() {
    let page = include_str!("../../docs/src/configuration.md");
    let table = crate::generated::between_markers(page, "<!-- generated: the options table");
    assert!(
        table == markdown_table().trim_end(),
        "docs/src/configuration.md's options table is stale: regenerate it with \
         `cargo run --example print_config_table` between its markers"
    );
}

/// Certificate pairs: lists paired by position from flags, the
/// environment or TOML arrays; unequal lists are refused.
#[test]
fn tls_files_pair_by_position_from_every_source() {
    let c = serve(
        &["--tls-cert", "a.pem, b.pem", "--tls-key", "a.key,b.key"],
        |_| None,
    );
    assert_eq!(
        c.tls.certs,
        [PathBuf::from("a.pem"), PathBuf::from("b.pem")]
    );
    assert_eq!(c.tls.keys[1], PathBuf::from("b.key"));
    let env = |k: &str| match k {
        "CORECAST_TLS_CERT" => Some("c.pem".to_string()),
        "CORECAST_TLS_KEY" => Some("c.key".to_string()),
        _ => None,
    };
    assert_eq!(serve(&[], env).tls.certs, [PathBuf::from("c.pem")]);
    let mut cfg = Config::default();
    let toml = "tls-cert = [\"a.pem\", \"b.pem\"]\ntls-key = [\"a.key\", \"b.key\"]\n";
    apply_toml(&mut cfg, toml, "t.toml").unwrap();
    assert_eq!(cfg.tls.keys.len(), 2);
    let e = Config::from_args(["--tls-cert", "a.pem,b.pem", "--tls-key", "a.key"], |_| {
        None
    })
    .unwrap_err();
    assert!(e.0.contains("one key per certificate"), "{e}");
    assert!(!Config::default().tls.enabled());
}

#[test]
fn a_toml_file_sits_between_defaults_and_env() {
    let dir = std::env::temp_dir().join(format!("corecast-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("corecast.toml");
    std::fs::write(
        &path,
        "listen = \"0.0.0.0:9000\"\nmax-frame-size = \"64KiB\"\ncpu = 1\nexclude-sender = true\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let env = |k: &str| (k == "CORECAST_MAX_FRAME_SIZE").then(|| "2KiB".to_string());
    let c = serve(&["--config", p, "--cpu", "0"], env);
    assert_eq!(c.listen.to_string(), "0.0.0.0:9000", "file over default");
    assert_eq!(c.ws.max_frame_size, 2048, "env over file");
    assert_eq!(c.cpu, Some(0), "flag over file");
    assert!(c.exclude_sender);
    std::fs::write(&path, "nope = 1\n").unwrap();
    let err = Config::from_args(["--config", p], no_env).unwrap_err();
    assert!(err.0.contains("unknown key `nope`"), "{err}");
    std::fs::write(&path, "cpu = [1]\n").unwrap();
    assert!(Config::from_args(["--config", p], no_env).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn subcommands_parse() {
    match Config::from_args(["check-config", "--cpu", "1"], no_env).unwrap() {
        Command::CheckConfig(c) => assert_eq!(c.cpu, Some(1)),
        other => panic!("{other:?}"),
    }
    match Config::from_args(["healthcheck"], no_env).unwrap() {
        Command::Healthcheck(u) => assert_eq!(u, DEFAULT_HEALTHCHECK_URL),
        other => panic!("{other:?}"),
    }
    let c = Config::from_args(
        [
            "check-config",
            "--token-secret",
            "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t",
        ],
        no_env,
    )
    .unwrap();
    assert!(
        !format!("{c:?}").contains("s3cr3t"),
        "secrets never printed"
    );
}

#[test]
fn cache_options_default_validate_and_hide_the_token() {
    let c = serve(&[], no_env).cache;
    assert!(c.origin.is_none() && c.purge_token.is_none());
    assert_eq!((c.prefix.as_str(), c.origin_max_body), ("/api/", 8 << 20));
    assert_eq!(c.max_bytes, 64 << 20);
    assert_eq!(c.default_ttl, Duration::from_secs(60));
    assert_eq!(c.coalesce_timeout, Duration::from_secs(5));
    assert_eq!(c.stale_while_revalidate, Duration::from_secs(10));
    assert_eq!(c.stale_if_error, Duration::from_secs(300));
    assert_eq!(c.redis_timeout, Duration::from_millis(100));
    let env = |k: &str| (k == "CORECAST_CACHE_PURGE_TOKEN").then(|| "t0ken".to_string());
    let c = serve(&["--origin", "http://127.0.0.1:9/v1"], env).cache;
    assert_eq!(c.origin.unwrap().to_string(), "http://127.0.0.1:9/v1");
    assert_eq!(c.purge_token.as_ref().map(Secret::expose), Some("t0ken"));
    assert!(!format!("{:?}", c.purge_token).contains("t0ken"));
    let c = serve(&["--origin", "https://api.example/v1"], no_env).cache;
    assert!(c.origin.unwrap().tls);
    for args in [
        &["--origin", "ftp://a"][..],
        &["--cache-prefix", "api"],
        &["--cache-prefix", "/api"],
        &["--cache-purge-token", ""],
        &["--origin", "http://a", "--origin-timeout", "10s"],
        &["--origin", "http://a", "--cache-coalesce-timeout", "20s"],
    ] {
        assert!(
            Config::from_args(args.iter().copied(), no_env).is_err(),
            "{args:?} should fail"
        );
    }
}

#[test]
fn a_short_token_secret_is_refused_without_echoing_it() {
    let err = Config::from_args(["--token-secret", "short-s3cr3t"], no_env).unwrap_err();
    assert!(err.0.contains("at least 32"), "{err}");
    assert!(!err.0.contains("short-s3cr3t"), "secret echoed: {err}");
    let long = "x".repeat(32);
    let c = serve(&["--token-secret", &long, "--token-audience", "cc"], no_env);
    assert!(c.auth.token_secret.is_some());
    assert_eq!(c.auth.token_audience.as_deref(), Some("cc"));
}

#[test]
fn redis_cluster_is_exclusive_with_redis_url() {
    let c = serve(&["--redis-cluster", "redis://:pw@a:7000,b:7001"], no_env);
    assert!(c.redis.enabled() && c.redis.url.is_none());
    let seeds = c.redis.cluster.expect("cluster mode");
    assert_eq!(seeds.seeds.len(), 2);
    assert_eq!(seeds.url.password.as_deref(), Some("pw"));
    let env = |k: &str| (k == "REDIS_URL").then(|| "redis://h:1".to_string());
    let err = Config::from_args(["--redis-cluster", "a:7000"], env).unwrap_err();
    assert!(err.0.contains("exclusive"), "{err}");
    let err = Config::from_args(
        ["--redis-cluster", "a:7000", "--redis-prefix", "cc{x}:"],
        no_env,
    )
    .unwrap_err();
    assert!(err.0.contains("hash tags"), "{err}");
    let c = serve(
        &["--redis-url", "rediss://h", "--redis-tls-ca", "ca.pem"],
        no_env,
    );
    assert!(c.redis.url.expect("url").tls && c.redis.tls_ca.is_some());
    let err = Config::from_args(["--redis-tls-ca", "ca.pem"], no_env).unwrap_err();
    assert!(err.0.contains("needs a rediss://"), "{err}");
}

#[test]
fn a_sentinel_url_selects_sentinel_mode() {
    let url = "redis+sentinel://:pw@s1:26380,s2/1?master=mymaster&sentinel_password=sp";
    let c = serve(&["--redis-url", url], no_env);
    assert!(c.redis.enabled() && c.redis.url.is_none() && c.redis.cluster.is_none());
    let s = c.redis.sentinel.expect("sentinel mode");
    assert_eq!((s.sentinels.len(), s.master.as_str()), (2, "mymaster"));
    assert_eq!((s.data.password.as_deref(), s.data.db), (Some("pw"), 1));
    let env = |k: &str| (k == "REDIS_URL").then(|| url.to_string());
    let err = Config::from_args(["--redis-cluster", "a:7000"], env).unwrap_err();
    assert!(err.0.contains("exclusive"), "{err}");
    let err = Config::from_args(["--redis-url", "redis+sentinel://s1"], no_env).unwrap_err();
    assert!(err.0.contains("master"), "{err}");
    let tls = "rediss+sentinel://s1?master=m";
    let c = serve(&["--redis-url", tls, "--redis-tls-ca", "ca.pem"], no_env);
    assert!(c.redis.sentinel.expect("sentinel").data.tls);
    // The flag given twice: the last one wins, whichever its kind.
    let c = serve(&["--redis-url", url, "--redis-url", "redis://h:1"], no_env);
    assert!(c.redis.sentinel.is_none() && c.redis.url.is_some());
}

#[test]
fn config_errors_never_echo_secrets() {
    let cases: [(&[&str], &str, &str, &str); 8] = [
        (&[], "REDIS_URL", "redis://u:hunter2@h:99999", "hunter2"),
        (&[], "REDIS_CLUSTER", "redis://u:hunter2@h:99999", "hunter2"),
        (&[], "REDIS_CLUSTER", "u:hunter2@h:1/2", "hunter2"),
        (&[], "REDIS_URL", "redis://:hunter2@", "hunter2"),
        (
            &[],
            "CORECAST_CACHE_PURGE_TOKEN",
            "t0ken-s3cr3t\n",
            "t0ken-s3cr3t",
        ),
        (&["--token-secret=short-s3cr3t"], "", "", "short-s3cr3t"),
        (&["--token-secret", "short-s3cr3t"], "", "", "short-s3cr3t"),
        (&["--publish-key="], "", "", "--publish-key="),
    ];
    for (args, var, value, secret) in cases {
        let env = |k: &str| (k == var).then(|| value.to_string());
        let err = Config::from_args(args.iter().copied(), env).unwrap_err();
        assert!(!err.0.contains(secret), "{secret:?} echoed: {err}");
    }
    let env = |k: &str| (k == "REDIS_URL").then(|| "redis://u:hunter2@h:99999".to_string());
    let err = Config::from_args(Vec::<String>::new(), env).unwrap_err();
    assert!(err.0.contains("redis://u:***@h:99999"), "{err}");
    // A TOML file with a syntax error on a secret's line.
    let err = apply_toml(
        &mut Config::default(),
        "publish-key = \"s3cr3t-k3y\n",
        "f.toml",
    )
    .unwrap_err();
    assert!(err.0.contains("f.toml: line 1"), "{err}");
    assert!(!err.0.contains("s3cr3t-k3y"), "{err}");
    let err = apply_toml(
        &mut Config::default(),
        "cache-purge-token = \"a b\"\n",
        "f.toml",
    )
    .unwrap_err();
    assert!(!err.0.contains("a b"), "{err}");
}

#[test]
fn pusher_apps_come_from_flags_env_and_toml_lists() {
    let mut cfg = Config::default();
    let toml = "pusher-app = [\"1:k1:s1\", \"2:k2:s2:client-events\"]\n";
    apply_toml(&mut cfg, toml, "f.toml").unwrap();
    assert_eq!(cfg.pusher.apps.len(), 2);
    assert!(cfg.pusher.apps[1].client_events);
    let env = |k: &str| (k == "CORECAST_PUSHER_APP").then(|| "3:k3:s3,4:k4:s4".to_string());
    let args = ["--pusher-app", "5:k5:s5", "--pusher-app", "6:k6:s6"];
    let Command::Serve(cfg) = Config::from_args(args, env).unwrap() else {
        panic!("serve expected")
    };
    let ids: Vec<&str> = cfg.pusher.apps.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["3", "4", "5", "6"]);
    // A bad app never echoes its secret.
    let err = Config::from_args(["--pusher-app", "1:k:t0p-s3cret:x"], |_| None).unwrap_err();
    assert!(!err.0.contains("t0p-s3cret"), "{err}");
}

#[test]
fn pusher_webhooks_need_a_known_app_and_an_http_or_https_url() {
    let args = [
        "--pusher-app",
        "1:k:s",
        "--pusher-webhook",
        "1=http://h:9/hook",
    ];
    let Command::Serve(cfg) = Config::from_args(args, |_| None).unwrap() else {
        panic!("serve expected")
    };
    assert_eq!(cfg.pusher.webhooks[0].1.base_path, "/hook");
    for bad in [
        ["--pusher-app", "1:k:s", "--pusher-webhook", "2=http://h/"],
        ["--pusher-app", "1:k:s", "--pusher-webhook", "1=ftp://h/"],
        ["--pusher-app", "1:k:s", "--pusher-webhook", "http://h/"],
    ] {
        assert!(Config::from_args(bad, |_| None).is_err(), "{bad:?}");
    }
}

fn refused(args: &[&str]) -> String {
    match Config::from_args(args.iter().copied(), no_env) {
        Err(e) => e.0,
        Ok(c) => panic!("expected an error for {args:?}, got {c:?}"),
    }
}

#[test]
fn workers_default_to_one_and_take_their_cpus_in_order() {
    let c = serve(&[], no_env);
    assert_eq!(c.workers, Workers::Count(1));
    assert!(!c.multi_worker());
    assert_eq!(c.worker_ring, 4096);
    assert_eq!(
        c.worker_cpus(&[2, 3]).unwrap(),
        [2],
        "the first CPU allowed"
    );
    let c = serve(&["--workers", "2"], no_env);
    assert_eq!(c.worker_cpus(&[0, 1, 5]).unwrap(), [0, 1]);
    let c = serve(&["--workers", "auto", "--cpus", "1-3,6"], no_env);
    assert_eq!(
        c.worker_cpus(&[0]).unwrap(),
        [1, 2, 3, 6],
        "--cpus over what is allowed"
    );
    let c = serve(&["--workers=2", "--cpus", "3,1,2"], no_env);
    assert_eq!(c.worker_cpus(&[]).unwrap(), [3, 1], "the first N of --cpus");
    let c = serve(&["--workers", "auto"], |k| {
        (k == "CORECAST_CPUS").then(|| "0,2".into())
    });
    assert_eq!(c.worker_cpus(&[0, 1, 2, 3]).unwrap(), [0, 2]);
    let c = serve(&["--cpu", "1"], no_env);
    assert_eq!(
        c.worker_cpus(&[0, 1]).unwrap(),
        [1],
        "--cpu is the one-worker form"
    );
}

#[test]
fn bad_worker_settings_are_refused_with_their_reason() {
    let e = serve(&["--workers", "3"], no_env)
        .worker_cpus(&[0, 1])
        .unwrap_err();
    assert!(
        e.contains("more workers than CPUs (2 the process may use)"),
        "{e}"
    );
    let e = serve(&["--workers", "2", "--cpus", "0"], no_env)
        .worker_cpus(&[0, 1])
        .unwrap_err();
    assert!(e.contains("--cpus lists"), "{e}");
    assert!(refused(&["--workers", "0"]).contains("expected auto or a count from 1 to 64"));
    assert!(refused(&["--workers", "65"]).contains("from 1 to 64"));
    assert!(refused(&["--cpus", "3-1"]).contains("CPU list"));
    assert!(refused(&["--cpus", "0,0"]).contains("listed twice"));
    assert!(refused(&["--cpus", "x"]).contains("CPU list"));
    assert!(refused(&["--cpu", "0", "--cpus", "0-1"]).contains("exclusive"));
    assert!(refused(&["--worker-ring", "8"]).contains("64 to"));
    // In Redis mode each worker is an instance: what lives in Redis is
    // served with several workers.
    let redis = ["--workers", "2", "--redis-url", "redis://127.0.0.1:6379"];
    for more in [
        &["--history-size", "10"][..],
        &["--presence-channels", "*"],
        &["--admin-key", "0123456789abcdef0123"],
        &["--pusher-app", "1:key:secret"],
    ] {
        serve(&[&redis[..], more].concat(), no_env);
    }
    // History, presence and Pusher apps' channels are kept by each
    // channel's owner worker, with or without Redis; the HTTP cache's
    // memory store is the process's; hooks run on every worker.
    serve(&["--workers", "2", "--history-size", "10"], no_env);
    serve(&["--workers", "2", "--pusher-app", "1:key:secret"], no_env);
    serve(
        &["--workers", "2", "--origin", "http://127.0.0.1:1"],
        no_env,
    );
    serve(&["--workers", "2", "--presence-channels", "*"], no_env);
    serve(
        &["--workers", "2", "--admin-key", "0123456789abcdef0123"],
        no_env,
    );
    // Hooks are served with several workers, with or without Redis.
    serve(
        &["--workers", "2", "--proxy-connect", "http://127.0.0.1:1/c"],
        no_env,
    );
}

#[test]
fn consumers_come_from_flags_and_toml_tables() {
    let c = serve(
        &[
            "--consumer",
            "postgres://app@db/shop?table=outbox&name=orders",
            "--consumer",
            "postgres://app@db/shop?table=audit",
        ],
        no_env,
    );
    let names: Vec<&str> = c.consumers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["orders", "audit"]);
    let err = Config::from_args(
        [
            "--consumer",
            "postgres://h/db",
            "--consumer",
            "postgres://h/db",
        ],
        no_env,
    )
    .unwrap_err();
    assert!(err.0.contains("two consumers named"), "{err}");
    let mut cfg = Config::default();
    let toml =
        "[[consumer]]\nurl = \"postgres://h/db?sslmode=require\"\ntable = \"outbox\"\nbatch = 50\n";
    apply_toml(&mut cfg, toml, "cc.toml").unwrap();
    let c = &cfg.consumers[0];
    assert_eq!((c.table.as_str(), c.batch), ("outbox", 50));
    assert_eq!(c.dsn, "postgres://h/db?sslmode=require");
    for bad in [
        "[[consumer]]\ntable = \"x\"\n",
        "[[consumer]]\nurl = \"postgres://h/db\"\ncolor = \"red\"\n",
        "[[consumer]]\nurl = \"postgres://h/db\"\nbatch = true\n",
    ] {
        let e = apply_toml(&mut Config::default(), bad, "cc.toml").unwrap_err();
        assert!(e.0.contains("[[consumer]]"), "{e}");
    }
}
