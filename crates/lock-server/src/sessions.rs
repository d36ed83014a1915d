//! Whose sessions are whose: a session answers only the credential that opened it (L1 records
//! it with the session, in the store). `SessionBinding` is the only code that decides it; it
//! keeps what it read, since a session's opener never changes, so a replica asks the store at
//! most once per session it serves (and again only after forgetting it).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use lock_api::SessionId;
use service_kit::Caller;

use crate::metrics as m;
use crate::store::{LockStore, SessionOwner, StoreError};

/// Sessions whose opener a replica keeps in memory (about 100 bytes each). Past it the
/// oldest is forgotten and read again from the store when next used.
pub const SESSION_OWNERS_KEPT: usize = 65_536;

/// What a caller presenting a session id is to that session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// The credential that opened it: the route goes on.
    Opener(Arc<SessionOwner>),
    /// The store does not know the session: the route goes on and the store answers as it
    /// does for any unknown session.
    Unknown,
    /// Another credential's session. The route answers exactly as for an unknown session, so
    /// the caller learns nothing of it, and touches nothing.
    Foreign,
}

/// The openers of sessions this replica has served.
#[derive(Debug, Default)]
pub struct SessionBinding {
    kept: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    owners: HashMap<SessionId, Arc<SessionOwner>>,
    order: VecDeque<SessionId>,
}

impl SessionBinding {
    /// Remembers the opener of a session this replica just opened.
    pub fn opened(&self, session: SessionId, owner: SessionOwner) {
        self.lock().keep(session, Arc::new(owner));
    }

    /// Forgets a closed session.
    pub fn closed(&self, session: SessionId) {
        self.lock().owners.remove(&session);
    }

    /// What `caller` is to `session`, reading the store when this replica has not seen the
    /// session yet. A `Foreign` answer is logged (`session_refused`, the session's tag) and
    /// counted: someone holds another credential's session id.
    pub async fn standing(
        &self,
        store: &dyn LockStore,
        caller: &Caller,
        session: SessionId,
        route: &'static str,
    ) -> Result<Standing, StoreError> {
        let kept = self.lock().owners.get(&session).cloned();
        let owner = match kept {
            Some(owner) => owner,
            None => match store.session_owner(session).await? {
                Some(owner) => {
                    let owner = Arc::new(owner);
                    self.lock().keep(session, Arc::clone(&owner));
                    owner
                }
                None => return Ok(Standing::Unknown),
            },
        };
        if owner.credential == caller.name {
            return Ok(Standing::Opener(owner));
        }
        metrics::counter!(m::SESSIONS_REFUSED_TOTAL, "route" => route).increment(1);
        tracing::warn!(event = "session_refused", credential = %caller.name, session = %session.tag(), route, "a credential presented another credential's session");
        Ok(Standing::Foreign)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Kept {
    fn keep(&mut self, session: SessionId, owner: Arc<SessionOwner>) {
        if self.owners.insert(session, owner).is_some() {
            return;
        }
        self.order.push_back(session);
        while self.order.len() > SESSION_OWNERS_KEPT {
            if let Some(oldest) = self.order.pop_front() {
                self.owners.remove(&oldest);
            }
        }
        debug_assert!(self.owners.len() <= SESSION_OWNERS_KEPT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;
    use lock_api::{CredentialEntry, OwnerId};

    fn caller(name: &str) -> Caller {
        std::sync::Arc::new(CredentialEntry::from_secret(name, &["client"], "secret"))
    }

    #[tokio::test]
    async fn a_session_stands_only_with_the_credential_that_opened_it() {
        let store = MemoryStore::new();
        let owner = SessionOwner {
            owner: OwnerId::parse("a-1").unwrap(),
            credential: "client-a".into(),
        };
        let session = store.open_session(&owner, 5_000).await.unwrap().session_id;
        let binding = SessionBinding::default();
        let standing = |name: &'static str| {
            let binding = &binding;
            let store = &store;
            async move {
                binding
                    .standing(store, &caller(name), session, "heartbeat")
                    .await
                    .unwrap()
            }
        };
        assert_eq!(
            standing("client-a").await,
            Standing::Opener(Arc::new(owner.clone()))
        );
        assert_eq!(standing("client-b").await, Standing::Foreign);
        assert_eq!(
            binding
                .standing(
                    &store,
                    &caller("client-a"),
                    SessionId::random(),
                    "heartbeat"
                )
                .await
                .unwrap(),
            Standing::Unknown
        );
        // An anonymous session (no credential) answers no caller.
        let anonymous = store
            .create_session(&OwnerId::parse("a-2").unwrap(), 5_000)
            .await
            .unwrap()
            .session_id;
        assert_eq!(
            binding
                .standing(&store, &caller("client-a"), anonymous, "heartbeat")
                .await
                .unwrap(),
            Standing::Foreign
        );
    }

    #[test]
    fn it_keeps_at_most_its_bound() {
        let mut kept = Kept::default();
        for _ in 0..SESSION_OWNERS_KEPT + 10 {
            kept.keep(
                SessionId::random(),
                Arc::new(SessionOwner::anonymous(&OwnerId::parse("o").unwrap())),
            );
        }
        assert_eq!(kept.owners.len(), SESSION_OWNERS_KEPT);
    }
}
