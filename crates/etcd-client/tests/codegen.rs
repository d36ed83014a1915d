//! The checked-in gRPC code (`src/rpc/generated/`) is exactly what etcd's `.proto` files under
//! `proto/` generate, trimmed to the services this crate carries; no system `protoc` involved.
//!
//! `protox` compiles the `.proto` files to a descriptor set; the services we do not carry are
//! removed from it together with every message and enum that only they reach; prost and tonic
//! generate the client code from what is left. The test fails on any difference from the
//! checked-in files; `UPDATE_GENERATED=1 cargo test -p etcd-client --test codegen` rewrites
//! them instead.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use prost_types::{DescriptorProto, FileDescriptorProto, FileDescriptorSet};

/// The `.proto` files we compile (their imports come along).
const PROTOS: &[&str] = &[
    "etcd/api/etcdserverpb/rpc.proto",
    "etcd/server/etcdserver/api/v3lock/v3lockpb/v3lock.proto",
];
/// The services the client carries, by full name. Everything else in the files is dropped
/// unless one of these reaches it.
const SERVICES: &[&str] = &[
    "etcdserverpb.KV",
    "etcdserverpb.Watch",
    "etcdserverpb.Lease",
    "etcdserverpb.Auth",
    "v3lockpb.Lock",
];
/// The packages generated, one file each under `src/rpc/generated/`.
const PACKAGES: &[&str] = &["authpb", "etcdserverpb", "mvccpb", "v3lockpb"];

// Field numbers of `FileDescriptorProto`, as they appear in source-code-info paths.
const FILE_MESSAGE_TYPE: i32 = 4;
const FILE_ENUM_TYPE: i32 = 5;
const FILE_SERVICE: i32 = 6;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn generated_code_matches_the_proto_files() {
    let proto_dir = crate_dir().join("proto");
    let files: Vec<PathBuf> = PROTOS.iter().map(|p| proto_dir.join(p)).collect();
    let fds = protox::compile(&files, [&proto_dir]).expect("etcd's .proto files compile");
    let fds = trim(fds);

    let out = tempfile_dir();
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .out_dir(&out)
        .compile_fds(fds)
        .expect("prost and tonic generate the client code");

    let checked_in = crate_dir().join("src/rpc/generated");
    let update = std::env::var_os("UPDATE_GENERATED").is_some();
    let mut drift = Vec::new();
    for package in PACKAGES {
        let name = format!("{package}.rs");
        let fresh = std::fs::read_to_string(out.join(&name))
            .unwrap_or_else(|e| panic!("{name} was not generated: {e}"));
        let path = checked_in.join(&name);
        if update {
            std::fs::create_dir_all(&checked_in).expect("create src/rpc/generated");
            std::fs::write(&path, &fresh).expect("write the generated file");
            continue;
        }
        if std::fs::read_to_string(&path).ok().as_deref() != Some(fresh.as_str()) {
            drift.push(name);
        }
    }
    let generated: BTreeSet<String> = std::fs::read_dir(&out)
        .expect("read the output directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let expected: BTreeSet<String> = PACKAGES.iter().map(|p| format!("{p}.rs")).collect();
    assert_eq!(
        generated, expected,
        "the trimmed descriptor set generates exactly PACKAGES"
    );
    std::fs::remove_dir_all(&out).ok();
    assert!(
        drift.is_empty(),
        "src/rpc/generated/ drifted from proto/ in {drift:?}: run \
         UPDATE_GENERATED=1 cargo test -p etcd-client --test codegen and commit the result"
    );
}

#[test]
fn only_the_carried_services_are_generated() {
    let generated = crate_dir().join("src/rpc/generated/etcdserverpb.rs");
    let code = std::fs::read_to_string(generated).expect("read etcdserverpb.rs");
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

/// A fresh directory under the target's temporary space (removed by the test).
fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("etcd-client-codegen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the output directory");
    dir
}

/// Keeps the carried services and what they reach; drops files left empty and files outside
/// `PACKAGES` (google.api's HTTP annotations, versionpb's options, descriptor.proto).
fn trim(mut fds: FileDescriptorSet) -> FileDescriptorSet {
    let mut reached: BTreeSet<String> = BTreeSet::new();
    let mut todo: Vec<String> = Vec::new();
    for file in &fds.file {
        for service in &file.service {
            if SERVICES.contains(&full_name(file, service.name()).as_str()) {
                for method in &service.method {
                    todo.push(method.input_type().to_owned());
                    todo.push(method.output_type().to_owned());
                }
            }
        }
    }
    let top_level = top_level_types(&fds);
    while let Some(name) = todo.pop() {
        let Some((top, message)) = top_level.iter().find_map(|(top, message)| {
            (name == *top || name.starts_with(&format!("{top}."))).then_some((top, message))
        }) else {
            panic!("{name} is not declared in the compiled files");
        };
        if !reached.insert(top.clone()) {
            continue;
        }
        if let Some(message) = message {
            let mut types = Vec::new();
            field_types(message, &mut types);
            todo.extend(types);
        }
    }

    for file in &mut fds.file {
        let file_name = |name: &str| format!(".{}.{name}", file.package());
        let keep_messages: Vec<bool> = file
            .message_type
            .iter()
            .map(|m| reached.contains(&file_name(m.name())))
            .collect();
        let keep_enums: Vec<bool> = file
            .enum_type
            .iter()
            .map(|e| reached.contains(&file_name(e.name())))
            .collect();
        let keep_services: Vec<bool> = file
            .service
            .iter()
            .map(|s| SERVICES.contains(&full_name(file, s.name()).as_str()))
            .collect();
        retain_by(&mut file.message_type, &keep_messages);
        retain_by(&mut file.enum_type, &keep_enums);
        retain_by(&mut file.service, &keep_services);
        // Comments are attached by index: renumber the kept ones, drop the rest.
        let renumber: BTreeMap<i32, BTreeMap<i32, i32>> = [
            (FILE_MESSAGE_TYPE, new_indices(&keep_messages)),
            (FILE_ENUM_TYPE, new_indices(&keep_enums)),
            (FILE_SERVICE, new_indices(&keep_services)),
        ]
        .into_iter()
        .collect();
        if let Some(info) = file.source_code_info.as_mut() {
            info.location
                .retain_mut(|location| match location.path.as_slice() {
                    [kind, index, ..] if renumber.contains_key(kind) => {
                        match renumber[kind].get(index) {
                            Some(new) => {
                                location.path[1] = *new;
                                true
                            }
                            None => false,
                        }
                    }
                    _ => true,
                });
        }
    }
    fds.file.retain(|file| {
        PACKAGES.contains(&file.package())
            && !(file.message_type.is_empty()
                && file.enum_type.is_empty()
                && file.service.is_empty())
    });
    fds
}

fn full_name(file: &FileDescriptorProto, name: &str) -> String {
    format!("{}.{name}", file.package())
}

/// Every top-level message and enum by its full name (".pkg.Name"); enums carry no message.
fn top_level_types(fds: &FileDescriptorSet) -> Vec<(String, Option<&DescriptorProto>)> {
    let mut out = Vec::new();
    for file in &fds.file {
        for message in &file.message_type {
            out.push((
                format!(".{}.{}", file.package(), message.name()),
                Some(message),
            ));
        }
        for enumeration in &file.enum_type {
            out.push((format!(".{}.{}", file.package(), enumeration.name()), None));
        }
    }
    out
}

/// The message and enum types the fields of `message` and of its nested messages name.
fn field_types(message: &DescriptorProto, out: &mut Vec<String>) {
    for field in &message.field {
        if !field.type_name().is_empty() {
            out.push(field.type_name().to_owned());
        }
    }
    for nested in &message.nested_type {
        field_types(nested, out);
    }
}

fn retain_by<T>(items: &mut Vec<T>, keep: &[bool]) {
    let mut index = 0;
    items.retain(|_| {
        index += 1;
        keep[index - 1]
    });
}

/// Old index to new index of the kept items.
fn new_indices(keep: &[bool]) -> BTreeMap<i32, i32> {
    let mut next = 0;
    let mut map = BTreeMap::new();
    for (old, kept) in keep.iter().enumerate() {
        if *kept {
            map.insert(old as i32, next);
            next += 1;
        }
    }
    map
}
