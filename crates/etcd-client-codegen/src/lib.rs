//! Generates `vendor/etcd-client`'s gRPC code (`src/rpc/generated/`) from etcd's `.proto`
//! files (`vendor/etcd-client/proto/`) without a system `protoc`.
//!
//! `protox` (a protobuf compiler in Rust) compiles the `.proto` files to a descriptor set; the
//! services the client does not carry are removed from it together with every message and enum
//! only they reach; prost and tonic generate the client code from what is left.
//! `tests/drift.rs` fails when the checked-in files differ from a fresh generation;
//! `UPDATE_GENERATED=1 cargo test -p etcd-client-codegen` rewrites them instead.
//!
//! Architecture Invariant: this is the only place that turns `.proto` files into Rust; nothing
//! depends on this crate and no build script runs it, so building needs no `protoc`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use prost_types::{DescriptorProto, FileDescriptorProto, FileDescriptorSet};

/// The `.proto` files compiled (their imports come along), under `vendor/etcd-client/proto/`.
pub const PROTOS: &[&str] = &[
    "etcd/api/etcdserverpb/rpc.proto",
    "etcd/server/etcdserver/api/v3lock/v3lockpb/v3lock.proto",
];
/// The services the client carries, by full name. Everything else in the files is dropped
/// unless one of these reaches it.
pub const SERVICES: &[&str] = &[
    "etcdserverpb.KV",
    "etcdserverpb.Watch",
    "etcdserverpb.Lease",
    "etcdserverpb.Auth",
    "v3lockpb.Lock",
];
/// The packages generated, one file each (`{package}.rs`).
pub const PACKAGES: &[&str] = &["authpb", "etcdserverpb", "mvccpb", "v3lockpb"];

// Field numbers of `FileDescriptorProto`, as they appear in source-code-info paths.
const FILE_MESSAGE_TYPE: i32 = 4;
const FILE_ENUM_TYPE: i32 = 5;
const FILE_SERVICE: i32 = 6;

/// `vendor/etcd-client`, the fork whose code this crate generates.
pub fn client_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../vendor/etcd-client")
}

/// Where the generated files are checked in.
pub fn generated_dir() -> PathBuf {
    client_dir().join("src/rpc/generated")
}

/// Generates the client code of [`PACKAGES`] into `out_dir`, one `{package}.rs` each.
pub fn generate(out_dir: &Path) -> std::io::Result<()> {
    let proto_dir = client_dir().join("proto");
    let files: Vec<PathBuf> = PROTOS.iter().map(|p| proto_dir.join(p)).collect();
    let fds = protox::compile(&files, [&proto_dir])
        .map_err(|e| std::io::Error::other(format!("compile etcd's .proto files: {e}")))?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .out_dir(out_dir)
        .compile_fds(trim(fds)?)
}

/// Keeps the carried services and what they reach; drops files left empty and files outside
/// `PACKAGES` (google.api's HTTP annotations, versionpb's options, descriptor.proto).
fn trim(mut fds: FileDescriptorSet) -> std::io::Result<FileDescriptorSet> {
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
            return Err(std::io::Error::other(format!(
                "{name} is not declared in the compiled files"
            )));
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
                        match renumber.get(kind).and_then(|m| m.get(index)) {
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
    Ok(fds)
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
    let mut kept = keep.iter();
    items.retain(|_| kept.next().copied().unwrap_or(false));
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
