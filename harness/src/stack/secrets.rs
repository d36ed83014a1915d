//! The credentials and signing key a stack's services share: generated for a local stack,
//! read from the compose `.env` for compose.

use anyhow::Context;
use lock_api::FenceSigner;

/// The secrets of a stack's roles: each service gets only those of its own roles.
#[derive(Debug, Clone)]
pub struct Secrets {
    /// Payout creators, to create payouts (`PAYMENT_CREATOR_TOKEN`).
    pub creator: String,
    /// Executors to payment-resource and rail-proxy (`PAYOUT_EXECUTOR_TOKEN`).
    pub executor: String,
    /// Operators' repairs at payment-resource (`PAYMENT_ADMIN_TOKEN`).
    pub payment_admin: String,
    /// Readers of payouts, submissions and the ledger (`PAYMENT_READER_TOKEN`).
    pub reader: String,
    /// Lock clients, on every lock route but revoke (`LOCK_CLIENT_TOKEN`).
    pub lock_client: String,
    /// Operators' revokes at the lock-server (`LOCK_ADMIN_TOKEN`).
    pub lock_admin: String,
    /// rail-proxy to payment-resource (`PAYMENT_PROXY_TOKEN`).
    pub proxy: String,
    /// rail-proxy to rail-stub (`RAIL_PROXY_CREDENTIAL`).
    pub rail: String,
    /// rail-stub's admin (`RAIL_STUB_ADMIN_TOKEN`).
    pub rail_admin: String,
    /// `LOCK_SIGNING_KEY_ID`.
    pub signing_key_id: String,
    /// `LOCK_SIGNING_KEY`.
    pub signing_key: String,
}

impl Secrets {
    /// Fresh role tokens and the test signing key (local processes).
    pub(super) fn local() -> Self {
        Self {
            creator: secret(),
            executor: secret(),
            payment_admin: secret(),
            reader: secret(),
            lock_client: test_support::keys::LOCK_CLIENT_TOKEN.to_owned(),
            lock_admin: secret(),
            proxy: secret(),
            rail: secret(),
            rail_admin: secret(),
            signing_key_id: test_support::keys::SIGNING_KEY_ID.to_owned(),
            signing_key: test_support::signing_key_base64().to_owned(),
        }
    }

    /// The compose stack's, from `.env`.
    pub(super) fn from_env_file(env: &[(String, String)]) -> anyhow::Result<Self> {
        let get = |key: &str| {
            env.iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .with_context(|| format!("{key} in .env"))
        };
        Ok(Self {
            creator: get("PAYMENT_CREATOR_TOKEN")?,
            executor: get("PAYOUT_EXECUTOR_TOKEN")?,
            payment_admin: get("PAYMENT_ADMIN_TOKEN")?,
            reader: get("PAYMENT_READER_TOKEN")?,
            lock_client: get("LOCK_CLIENT_TOKEN")?,
            lock_admin: get("LOCK_ADMIN_TOKEN")?,
            proxy: get("PAYMENT_PROXY_TOKEN")?,
            rail: get("RAIL_PROXY_CREDENTIAL")?,
            rail_admin: get("RAIL_STUB_ADMIN_TOKEN")?,
            signing_key_id: get("LOCK_SIGNING_KEY_ID")?,
            signing_key: get("LOCK_SIGNING_KEY")?,
        })
    }

    /// The signer the stack's lock-servers use.
    pub fn signer(&self) -> anyhow::Result<FenceSigner> {
        FenceSigner::from_secret(&self.signing_key_id, &self.signing_key)
            .map_err(|e| anyhow::anyhow!("LOCK_SIGNING_KEY: {e}"))
    }

    /// Env of a lock-server replica.
    pub(super) fn lock_server_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("LOCK_CLIENT_TOKEN", self.lock_client.clone()),
            ("LOCK_ADMIN_TOKEN", self.lock_admin.clone()),
            ("LOCK_SIGNING_KEY", self.signing_key.clone()),
            ("LOCK_SIGNING_KEY_ID", self.signing_key_id.clone()),
        ]
    }
}

fn secret() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
