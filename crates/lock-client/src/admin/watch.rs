//! Watching (C2 §2.4d, C3 W1): a [`Watcher`] follows what happens to the locks under a
//! prefix, as the lock-server's server-sent events tell it, and reconnects on its own after
//! its last position, moving to the next endpoint when one fails: every event after that
//! position comes, in order, or a [`WatchItem::Gap`] says some are gone.

use std::time::Duration;

use lock_api::{LockError, LockEvent, RetryVerdict, WatchGap};

use super::AdminClient;
use crate::transport::WatchBody;

/// A stream that sends nothing (not even the server's keep-alive) this long is dead.
pub const WATCH_IDLE: Duration = Duration::from_secs(45);
/// Pause before reconnecting after a stream ended or could not open.
const RECONNECT_AFTER: Duration = Duration::from_millis(250);

/// What a watch stream answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchItem {
    /// Something happened to a lock under the prefix.
    Event(LockEvent),
    /// Events between two positions are gone (the store keeps them only so long): re-read
    /// the state you care about (L7); the stream goes on after `resume_from`.
    Gap(WatchGap),
}

impl AdminClient {
    /// Watches the keys under `prefix` (C2 §2.4d): every event after `after` (`None`: from
    /// this call on), or a gap. The first stream is open when this returns; later ones are
    /// reopened on their own.
    pub async fn watch(&self, prefix: &str, after: Option<u64>) -> Result<Watcher, LockError> {
        let mut watcher = Watcher::new(self.clone(), prefix.to_owned(), after);
        watcher.body = Some(self.open_watch(prefix, after).await?);
        watcher.opened().await?;
        Ok(watcher)
    }
}

/// A watch of the keys under a prefix. Made by [`AdminClient::watch`].
pub struct Watcher {
    admin: AdminClient,
    prefix: String,
    after: Option<u64>,
    body: Option<Box<dyn WatchBody>>,
    frames: Frames,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("prefix", &self.prefix)
            .field("after", &self.after)
            .field("connected", &self.body.is_some())
            .finish()
    }
}

impl Watcher {
    pub(crate) fn new(admin: AdminClient, prefix: String, after: Option<u64>) -> Self {
        Self {
            admin,
            prefix,
            after,
            body: None,
            frames: Frames::default(),
        }
    }

    /// The position of the last event answered (or the stream's start): a new watch after
    /// it misses nothing.
    pub fn position(&self) -> Option<u64> {
        self.after
    }

    /// The next event or gap. A lost stream is reopened after [`Watcher::position`]
    /// (unavailability and throttling are waited out); only a final error (a refused
    /// credential, a bad prefix) ends the watch.
    pub async fn next(&mut self) -> Result<WatchItem, LockError> {
        loop {
            while let Some(frame) = self.frames.next_frame() {
                if let Some(item) = self.answer(&frame)? {
                    return Ok(item);
                }
            }
            match self.body.as_mut() {
                None => self.open().await?,
                Some(body) => match tokio::time::timeout(WATCH_IDLE, body.chunk()).await {
                    Ok(Ok(Some(bytes))) => self.frames.push(&bytes),
                    _ => self.lost().await,
                },
            }
        }
    }

    /// Reads the first stream up to its `open` frame: from then on the watcher knows its
    /// position, and a stream lost later resumes after it (even one that started "from now").
    async fn opened(&mut self) -> Result<(), LockError> {
        let lost = |what: &str| LockError::Unavailable {
            message: format!("the watch stream {what} before it opened"),
        };
        loop {
            if let Some(frame) = self.frames.next_frame() {
                self.answer(&frame)?;
                if frame.event == "open" {
                    return Ok(());
                }
                continue;
            }
            let body = self.body.as_mut().ok_or_else(|| lost("was not there"))?;
            match tokio::time::timeout(WATCH_IDLE, body.chunk()).await {
                Ok(Ok(Some(bytes))) => self.frames.push(&bytes),
                _ => return Err(lost("ended")),
            }
        }
    }

    /// What one frame says: an item to answer, or nothing (the opening, a comment).
    fn answer(&mut self, frame: &Frame) -> Result<Option<WatchItem>, LockError> {
        let unreadable = |what: &str, err: serde_json::Error| LockError::Protocol {
            status: 200,
            message: format!("unreadable watch {what}: {err}"),
        };
        match frame.event.as_str() {
            "lock" => {
                let event: LockEvent =
                    serde_json::from_str(&frame.data).map_err(|e| unreadable("event", e))?;
                self.after = Some(event.position);
                Ok(Some(WatchItem::Event(event)))
            }
            "gap" => {
                let gap: WatchGap =
                    serde_json::from_str(&frame.data).map_err(|e| unreadable("gap", e))?;
                self.after = Some(gap.resume_from);
                Ok(Some(WatchItem::Gap(gap)))
            }
            "open" => {
                self.after = self.after.or_else(|| frame.id.as_deref()?.parse().ok());
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    async fn open(&mut self) -> Result<(), LockError> {
        match self.admin.open_watch(&self.prefix, self.after).await {
            Ok(body) => {
                self.body = Some(body);
                Ok(())
            }
            Err(err)
                if matches!(
                    err.retry(),
                    RetryVerdict::NextTick | RetryVerdict::Throttled
                ) =>
            {
                self.admin.sleep(RECONNECT_AFTER).await;
                Ok(())
            }
            Err(err) => Err(err),
        }
    }

    /// The stream ended, failed or went quiet: a partial frame is dropped (its event comes
    /// again after the position), and the next call reopens.
    async fn lost(&mut self) {
        self.body = None;
        self.frames = Frames::default();
        self.admin.sleep(RECONNECT_AFTER).await;
    }
}

/// One server-sent event.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Frame {
    event: String,
    id: Option<String>,
    data: String,
}

/// Server-sent events cut out of the bytes as they come (frames end with a blank line).
#[derive(Debug, Default)]
struct Frames {
    buffer: Vec<u8>,
}

impl Frames {
    fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole frame, if one has come.
    fn next_frame(&mut self) -> Option<Frame> {
        let end = self.buffer.windows(2).position(|w| w == b"\n\n")?;
        let raw: Vec<u8> = self.buffer.drain(..end + 2).collect();
        let text = String::from_utf8_lossy(&raw);
        let mut frame = Frame::default();
        let mut data = Vec::new();
        for line in text.lines() {
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => frame.event = value.to_owned(),
                "id" => frame.id = Some(value.to_owned()),
                "data" => data.push(value),
                _ => {}
            }
        }
        frame.data = data.join("\n");
        Some(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_cut_at_blank_lines_whatever_the_chunks() {
        let stream =
            b": keep-alive\n\nid: 7\nevent: lock\ndata: {\"a\":1}\n\nevent: gap\ndata: x\n";
        let mut frames = Frames::default();
        let mut seen = Vec::new();
        for chunk in stream.chunks(5) {
            frames.push(chunk);
            while let Some(frame) = frames.next_frame() {
                seen.push(frame);
            }
        }
        assert_eq!(seen.len(), 2, "the unfinished gap frame waits: {seen:?}");
        assert_eq!(seen[0], Frame::default(), "a comment is an empty frame");
        assert_eq!(
            seen[1],
            Frame {
                event: "lock".into(),
                id: Some("7".into()),
                data: "{\"a\":1}".into()
            }
        );
        frames.push(b"\n");
        assert_eq!(frames.next_frame().map(|f| f.event), Some("gap".into()));
    }
}
