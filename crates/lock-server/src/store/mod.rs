//! The stores a replica runs on: the `lock-store` crate's contract, memory store and
//! store-clock guard (re-exported here whole), and the two backends that need I/O crates,
//! PostgreSQL ([`PostgresStore`]) and etcd ([`EtcdStore`]).

mod etcd;
mod postgres;

pub use etcd::EtcdStore;
pub use lock_store::*;
pub use postgres::PostgresStore;
