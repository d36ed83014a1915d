//! The checked-in gRPC code of `vendor/etcd-client` is exactly what its `.proto` files generate.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use etcd_client_codegen::{PACKAGES, generate, generated_dir};

#[test]
fn checked_in_code_matches_a_fresh_generation() {
    let out = std::env::temp_dir().join(format!("etcd-client-codegen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    generate(&out).unwrap();

    let made: BTreeSet<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let expected: BTreeSet<String> = PACKAGES.iter().map(|p| format!("{p}.rs")).collect();
    assert_eq!(
        made, expected,
        "the trimmed descriptor set generates exactly PACKAGES"
    );

    let update = std::env::var_os("UPDATE_GENERATED").is_some();
    let mut drift = Vec::new();
    for name in &expected {
        let fresh = std::fs::read_to_string(out.join(name)).unwrap();
        let path = generated_dir().join(name);
        if update {
            std::fs::write(&path, &fresh).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(fresh.as_str()) {
            drift.push(name.clone());
        }
    }
    std::fs::remove_dir_all(&out).ok();
    assert!(
        drift.is_empty(),
        "vendor/etcd-client/src/rpc/generated/ drifted from its .proto files in {drift:?}: run \
         UPDATE_GENERATED=1 cargo test -p etcd-client-codegen and commit the result"
    );
}

#[test]
fn only_the_carried_services_are_generated() {
    let code = std::fs::read_to_string(generated_dir().join("etcdserverpb.rs")).unwrap();
    for carried in ["kv_client", "watch_client", "lease_client", "auth_client"] {
        assert!(
            code.contains(&format!("pub mod {carried}")),
            "{carried} is generated"
        );
    }
    for dropped in [
        "mod maintenance_client",
        "mod cluster_client",
        "struct StatusRequest",
    ] {
        assert!(
            !code.contains(&format!("pub {dropped}")),
            "{dropped} is not carried"
        );
    }
    for server in ["kv_server", "lease_server"] {
        assert!(
            !code.contains(&format!("pub mod {server}")),
            "no server code: {server}"
        );
    }
}
