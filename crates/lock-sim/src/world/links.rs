//! The parties on the network and the links between them: which are cut, and what each
//! last carried. The only code that knows them.

use std::collections::BTreeMap;

use crate::sched::Nanos;

/// A party on the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Node {
    /// A worker.
    Client(usize),
    /// A lock-server replica.
    Replica(usize),
    /// The fenced resource and the rail.
    Bank,
    /// A process polling the election's leader.
    Observer(usize),
    /// A process following the store's events under a prefix.
    Watcher(usize),
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Client(i) => write!(f, "c{i}"),
            Self::Replica(i) => write!(f, "r{i}"),
            Self::Bank => write!(f, "bank"),
            Self::Observer(i) => write!(f, "o{i}"),
            Self::Watcher(i) => write!(f, "w{i}"),
        }
    }
}

/// The links that are cut, and what each link last carried: the only code that knows them.
#[derive(Debug, Default)]
pub(super) struct Network {
    partitions: Vec<(Node, Node)>,
    last_sent_on_link: BTreeMap<(Node, Node), Nanos>,
}

impl Network {
    /// Whether `a` and `b` cannot reach each other (either way).
    pub(super) fn partitioned(&self, a: Node, b: Node) -> bool {
        self.partitions
            .iter()
            .any(|(x, y)| (*x == a && *y == b) || (*x == b && *y == a))
    }

    /// Cuts the link between `a` and `b` (once more, if cut already).
    pub(super) fn cut(&mut self, a: Node, b: Node) {
        self.partitions.push((a, b));
    }

    /// Heals one cut of the link `(a, b)`.
    pub(super) fn heal(&mut self, a: Node, b: Node) {
        if let Some(i) = self.partitions.iter().position(|p| *p == (a, b)) {
            self.partitions.remove(i);
        }
    }

    /// A message sent at `sent` arrived over `link`: whether it overtook one sent later.
    pub(super) fn arrived(&mut self, link: (Node, Node), sent: Nanos) -> bool {
        let last = self.last_sent_on_link.get(&link).copied().unwrap_or(0);
        self.last_sent_on_link.insert(link, sent.max(last));
        sent < last
    }
}
