//! The examples refuse bad input with one line and a non-zero exit, before touching anything.
//! (Their fencing runs against a real lock-server in `harness/tests/it/fence_check.rs`.)
#![allow(clippy::unwrap_used)]

use std::process::{Command, Output, Stdio};

fn fenced_file(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fenced-file"))
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Arguments, environment, and what the refusal must mention.
type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

fn one_line(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(text.trim_end().lines().count(), 1, "{text:?}");
    text
}

#[test]
fn fenced_file_refuses_bad_usage_and_environment_with_exit_2() {
    let dir = std::env::temp_dir().join(format!("fenced-file-{}", std::process::id()));
    let file = dir.join("f.txt");
    let file = file.to_str().unwrap();
    let cases: [Case<'_>; 5] = [
        (&[], &[], "usage:"),
        (&[file, "extra"], &[], "usage:"),
        (&[file], &[], "LOCK_KEY is not set"),
        (&[file], &[("LOCK_KEY", "no spaces please")], "lock_key"),
        (
            &[file],
            &[
                ("LOCK_KEY", "k"),
                ("LOCK_FENCING_TOKEN", "1"),
                ("LOCK_FENCING_PROOF", "p"),
                ("FENCE_PUBLIC_KEYS", "nonsense"),
            ],
            "FENCE_PUBLIC_KEYS",
        ),
    ];
    for (args, env, mentions) in cases {
        let out = fenced_file(args, env);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {out:?}");
        assert!(one_line(&out).contains(mentions), "{mentions}: {out:?}");
    }
    assert!(!dir.exists(), "nothing was created");
}

#[test]
fn fenced_file_refuses_a_malformed_token_or_proof_with_exit_1_and_writes_nothing() {
    let dir = std::env::temp_dir().join(format!("fenced-file-proof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("f.txt");
    let keys = "k1=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    for (token, proof, mentions) in [
        ("-1", "v2.k1.x.y", "INVALID_ARGUMENT"),
        ("3", "v2.k1.x.y", "PROOF_INVALID"),
    ] {
        let env = [
            ("LOCK_KEY", "k"),
            ("LOCK_FENCING_TOKEN", token),
            ("LOCK_FENCING_PROOF", proof),
            ("FENCE_PUBLIC_KEYS", keys),
        ];
        let out = fenced_file(&[file.to_str().unwrap()], &env);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(one_line(&out).contains(mentions), "{mentions}: {out:?}");
    }
    assert!(!file.exists(), "nothing was written");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fenced_file_refuses_a_fence_file_it_cannot_read_as_a_fence_and_writes_nothing() {
    use lock_api::{FenceSigner, FencingToken, GrantId, LockKey, SessionId};
    let dir = std::env::temp_dir().join(format!("fenced-file-fence-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("f.txt");
    let signer = FenceSigner::from_seed("t1", [5; 32]);
    let key = LockKey::parse("k").unwrap();
    let token = FencingToken(3);
    let proof = signer.sign(
        &key,
        token,
        &GrantId::derive(SessionId::random(), &key, token),
    );
    let keys = signer.verifier_entry();
    let env = [
        ("LOCK_KEY", "k"),
        ("LOCK_FENCING_TOKEN", "3"),
        ("LOCK_FENCING_PROOF", proof.as_str()),
        ("FENCE_PUBLIC_KEYS", keys.as_str()),
    ];
    for stored in ["", "seven g", "0 g", "-2 g"] {
        std::fs::write(dir.join("f.txt.fence"), stored).unwrap();
        let out = fenced_file(&[file.to_str().unwrap()], &env);
        assert_eq!(out.status.code(), Some(2), "{stored:?}: {out:?}");
        assert!(
            one_line(&out).contains("not a fence"),
            "{stored:?}: {out:?}"
        );
        assert!(!file.exists(), "{stored:?}: nothing was written");
    }
    // A token alone is a fence set before grants were named: token 3 is below it.
    std::fs::write(dir.join("f.txt.fence"), "7").unwrap();
    let out = fenced_file(&[file.to_str().unwrap()], &env);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(one_line(&out).contains("FENCED_OUT"), "{out:?}");
    std::fs::remove_file(dir.join("f.txt.fence")).unwrap();
    let out = fenced_file(&[file.to_str().unwrap()], &env);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a missing fence is a fresh resource: {out:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fenced_kv_refuses_to_start_without_its_settings() {
    let out = Command::new(env!("CARGO_BIN_EXE_fenced-kv"))
        .env_clear()
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(
        one_line(&out).contains("DATABASE_URL is not set"),
        "{out:?}"
    );
}
