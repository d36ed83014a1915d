//! The stores a replica runs on: the `lock-store` crate's contract, memory store and
//! store-clock guard (re-exported here whole), and the two backends that need I/O crates,
//! PostgreSQL ([`PostgresStore`]) and etcd ([`EtcdStore`]), and [`Batched`], group commit
//! in front of a store that commits a batch of writes together.

mod batched;
mod etcd;
mod postgres;

pub use batched::{Batched, STORE_BATCH_WRITES};
pub use etcd::EtcdStore;
pub use lock_store::*;
pub use postgres::PostgresStore;
