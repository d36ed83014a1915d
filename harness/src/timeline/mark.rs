//! The kinds of mark a timeline draws, each with its colour and its legend's name, and the
//! count of each a picture holds. One place for the colours, so the legend's swatches are the
//! marks' own.

/// A kind of mark on a timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// A grant that ended by a release or a session close (green bar).
    GrantReleased,
    /// A grant that ended by its expiry at the server (amber bar, orange line at the expiry).
    GrantExpired,
    /// A process paused (SIGSTOP to SIGCONT): a grey span on its executor's lane.
    Pause,
    /// An executor cut off the network: a blue span.
    Partition,
    /// A lock-server replica, the store or rail-proxy down or stalled: a pink span.
    Downtime,
    /// A loss the client declared at its conservative deadline: a red dashed line.
    Loss,
    /// A write the resource refused for its stale token: ✗.
    Fenced,
    /// A zombie episode's fenced write: a numbered purple badge `Zn` beside its ✗.
    Zombie,
}

impl Mark {
    /// Every kind, in the legend's order.
    pub const ALL: [Mark; 8] = [
        Mark::GrantReleased,
        Mark::GrantExpired,
        Mark::Pause,
        Mark::Partition,
        Mark::Downtime,
        Mark::Loss,
        Mark::Fenced,
        Mark::Zombie,
    ];

    /// The mark's fill (or stroke, for lines and glyphs).
    pub fn colour(self) -> &'static str {
        match self {
            Mark::GrantReleased => "#8c8",
            Mark::GrantExpired => "#fc8",
            Mark::Pause => "#bbb",
            Mark::Partition => "#9bf",
            Mark::Downtime => "#f99",
            Mark::Loss => "#e00",
            Mark::Fenced => "#000",
            Mark::Zombie => "#93c",
        }
    }

    /// The darker edge of a bar of this kind.
    pub fn edge(self) -> &'static str {
        match self {
            Mark::GrantReleased => "#394",
            Mark::GrantExpired => "#c70",
            _ => "none",
        }
    }

    /// What the legend calls marks of this kind (followed by their count).
    pub fn legend(self) -> &'static str {
        match self {
            Mark::GrantReleased => "grants released",
            Mark::GrantExpired => "grants expired at the server (orange line)",
            Mark::Pause => "pauses (SIGSTOP)",
            Mark::Partition => "partitions",
            Mark::Downtime => "replica/store/proxy down",
            Mark::Loss => "client-declared losses",
            Mark::Fenced => "fenced writes",
            Mark::Zombie => "zombies (Zn: zombie-N-payout-ID.svg)",
        }
    }

    /// The kind's name in the SVG (`data-kind`, for a reader or a test).
    pub fn id(self) -> &'static str {
        match self {
            Mark::GrantReleased => "grant-released",
            Mark::GrantExpired => "grant-expired",
            Mark::Pause => "pause",
            Mark::Partition => "partition",
            Mark::Downtime => "downtime",
            Mark::Loss => "loss",
            Mark::Fenced => "fenced",
            Mark::Zombie => "zombie",
        }
    }

    fn index(self) -> usize {
        Mark::ALL
            .iter()
            .position(|m| *m == self)
            .unwrap_or_default()
    }
}

/// How many marks of each kind a picture holds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts([usize; Mark::ALL.len()]);

impl Counts {
    /// One more mark of `kind`.
    pub fn add(&mut self, kind: Mark) {
        self.0[kind.index()] += 1;
    }

    /// The marks of `kind`.
    pub fn get(&self, kind: Mark) -> usize {
        self.0[kind.index()]
    }
}
