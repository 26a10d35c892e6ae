//! Frames ⇄ [`Message`]: the whole WMP/1 layout `[path…] "" "WMP01" COMMAND HEADERS
//! [PAYLOAD]` (spec §3.2), with every check of §3.6 and the bounds of [`Limits`]. Pure
//! functions on frame lists, so the same code serves a manager, a device and a worker, and
//! the fuzz target can drive it without sockets.

use bytes::Bytes;

use crate::error::DecodeError;
use crate::headers::Headers;
use crate::limits::{Limits, MAX_COMMAND_LEN};
use crate::message::*;

/// The signature frame: protocol WMP, version 1.
pub const SIGNATURE: &[u8] = b"WMP01";

/// Longest `lock` token, in bytes: a counter or a short random string is all a worker needs.
pub const MAX_LOCK_LEN: usize = 64;

/// Where the parts of a message are, as a device needs them: it routes on the path and the
/// command name and never parses headers (spec §3.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope {
    /// Index of the empty delimiter frame (= number of path frames).
    pub delimiter: usize,
    /// The command is READY (a device fans it out to every upstream).
    pub is_ready: bool,
}

/// Checks only the envelope: frame count, delimiter within the path limit, path frame sizes,
/// signature and a command frame of plausible size. What a stateless device validates.
pub fn envelope(frames: &[Bytes], limits: &Limits) -> Result<Envelope, DecodeError> {
    if frames.len() > limits.max_frames() {
        return Err(DecodeError::TooManyFrames);
    }
    let delimiter = frames
        .iter()
        .position(|f| f.is_empty())
        .ok_or(DecodeError::NoDelimiter)?;
    if delimiter > limits.max_path {
        return Err(DecodeError::PathTooLong);
    }
    if frames[..delimiter]
        .iter()
        .any(|f| f.len() > limits.max_path_frame)
    {
        return Err(DecodeError::PathFrameTooLong);
    }
    match frames.get(delimiter + 1) {
        Some(sig) if sig.as_ref() == SIGNATURE => {}
        _ => return Err(DecodeError::BadSignature),
    }
    let command = frames.get(delimiter + 2).ok_or(DecodeError::NoCommand)?;
    if command.is_empty() || command.len() > MAX_COMMAND_LEN {
        return Err(DecodeError::UnknownCommand);
    }
    Ok(Envelope {
        delimiter,
        is_ready: command.as_ref() == b"READY",
    })
}

/// Decodes one received ZeroMQ message (all its frames, including the path).
pub fn decode(frames: &[Bytes], limits: &Limits) -> Result<Message, DecodeError> {
    let env = envelope(frames, limits)?;
    let name = frames[env.delimiter + 2].as_ref();
    let kind = CommandKind::from_name(name).ok_or(DecodeError::UnknownCommand)?;
    let headers_frame = frames
        .get(env.delimiter + 3)
        .ok_or(DecodeError::NoHeaders)?;
    let rest = &frames[env.delimiter + 4..];
    if rest.len() > 1 {
        return Err(DecodeError::ExtraFrames);
    }
    let payload = rest.first().cloned().unwrap_or_default();
    if payload.len() > limits.max_payload {
        return Err(DecodeError::PayloadTooLarge);
    }
    let headers = Headers::parse(headers_frame, limits)?;
    let mut fields = Fields::new(&headers);
    let command = kind.build(&mut fields, payload)?;
    Ok(Message {
        path: frames[..env.delimiter].to_vec(),
        command,
        extra: fields.leftover(),
    })
}

/// Encodes a message into its frames, ready to send (a ROUTER sender puts the peer's
/// routing id first in `path`).
pub fn encode(msg: &Message) -> Vec<Bytes> {
    let mut lines = Lines::default();
    let mut payload = None;
    match &msg.command {
        Command::Ready(c) => {
            lines.opt_list("roles", &c.roles);
            lines.opt("worker", &c.worker);
        }
        Command::Wake(c) => {
            lines.opt("queue", &c.queue);
            lines.opt("manager", &c.manager);
        }
        Command::Give(c) => {
            lines.put("lock", &c.lock);
            lines.opt_list("roles", &c.roles);
            lines.opt("queue", &c.queue);
        }
        Command::Take(c) => {
            lines.put("lock", &c.lock);
            lines.put("manager", &c.manager);
            lines.num("job", c.job);
            lines.num("attempt", c.attempt);
            lines.put("queue", &c.queue);
            lines.num("timeout", c.timeout_ms);
            payload = Some(c.body.clone());
        }
        Command::No(c) => {
            lines.put("lock", &c.lock);
            lines.opt("manager", &c.manager);
        }
        Command::Done(c) => {
            lines.put("manager", &c.manager);
            lines.num("job", c.job);
            lines.num("attempt", c.attempt);
            lines.put("status", c.status.as_str());
            lines.opt("error", &c.error);
            payload = Some(c.result.clone());
        }
        Command::Status(c) => {
            lines.put("manager", &c.manager);
            lines.num("job", c.job);
            lines.num("attempt", c.attempt);
            if let Some(n) = c.num {
                lines.num("num", n);
            }
            if let Some(d) = c.den {
                lines.num("den", d);
            }
        }
        Command::Cancel(c) => {
            lines.put("manager", &c.manager);
            lines.num("job", c.job);
            lines.num("attempt", c.attempt);
        }
    }
    for (k, v) in msg.extra.iter() {
        if !lines.has(k) {
            lines.line(k, v);
        }
    }
    let mut frames = Vec::with_capacity(msg.path.len() + 5);
    frames.extend(msg.path.iter().cloned());
    frames.push(Bytes::new());
    frames.push(Bytes::from_static(SIGNATURE));
    frames.push(Bytes::from_static(msg.command.name().as_bytes()));
    frames.push(Bytes::from(lines.out));
    if let Some(p) = payload.filter(|p| !p.is_empty()) {
        frames.push(p);
    }
    frames
}

/// Most header lines a command defines (TAKE has six).
const MAX_DEFINED_KEYS: usize = 8;

/// A headers frame written line by line into one buffer: one allocation per message
/// instead of two per line and a second copy (the manager encodes a TAKE per job, and
/// allocation was a measurable share of its CPU). Remembers the defined keys written, so
/// an extra header never repeats one.
#[derive(Default)]
struct Lines {
    out: Vec<u8>,
    keys: [&'static str; MAX_DEFINED_KEYS],
    count: usize,
}

impl Lines {
    fn put(&mut self, key: &'static str, value: &str) {
        self.line(key, value);
        self.remember(key);
    }

    fn remember(&mut self, key: &'static str) {
        debug_assert!(self.count < MAX_DEFINED_KEYS, "raise MAX_DEFINED_KEYS");
        if let Some(slot) = self.keys.get_mut(self.count) {
            *slot = key;
            self.count += 1;
        }
    }

    fn num(&mut self, key: &'static str, value: u64) {
        // On the stack, without the formatting machinery (a TAKE carries two numbers).
        self.put(key, itoa::Buffer::new().format(value));
    }

    fn opt(&mut self, key: &'static str, value: &Option<String>) {
        if let Some(v) = value {
            self.put(key, v);
        }
    }

    fn opt_list(&mut self, key: &'static str, value: &Option<Vec<String>>) {
        if let Some(items) = value {
            self.line(key, "");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    self.out.push(b',');
                }
                self.out.extend_from_slice(item.as_bytes());
            }
            self.remember(key);
        }
    }

    /// Appends `key=value` (after a LF unless it is the first line).
    fn line(&mut self, key: &str, value: &str) {
        if self.out.is_empty() {
            self.out.reserve(128);
        } else {
            self.out.push(b'\n');
        }
        self.out.extend_from_slice(key.as_bytes());
        self.out.push(b'=');
        self.out.extend_from_slice(value.as_bytes());
    }

    fn has(&self, key: &str) -> bool {
        self.keys[..self.count].contains(&key)
    }
}

#[derive(Clone, Copy)]
enum CommandKind {
    Ready,
    Wake,
    Give,
    Take,
    No,
    Done,
    Status,
    Cancel,
}

impl CommandKind {
    fn from_name(name: &[u8]) -> Option<CommandKind> {
        Some(match name {
            b"READY" => CommandKind::Ready,
            b"WAKE" => CommandKind::Wake,
            b"GIVE" => CommandKind::Give,
            b"TAKE" => CommandKind::Take,
            b"NO" => CommandKind::No,
            b"DONE" => CommandKind::Done,
            b"STATUS" => CommandKind::Status,
            b"CANCEL" => CommandKind::Cancel,
            _ => return None,
        })
    }

    fn build(self, f: &mut Fields<'_>, payload: Bytes) -> Result<Command, DecodeError> {
        let carries_payload = matches!(self, CommandKind::Take | CommandKind::Done);
        if !carries_payload && !payload.is_empty() {
            return Err(DecodeError::UnexpectedPayload);
        }
        Ok(match self {
            CommandKind::Ready => Command::Ready(Ready {
                roles: f.list("roles")?,
                worker: f.name("worker")?,
            }),
            CommandKind::Wake => Command::Wake(Wake {
                queue: f.name("queue")?,
                manager: f.name("manager")?,
            }),
            CommandKind::Give => Command::Give(Give {
                lock: f.lock()?,
                roles: f.list("roles")?,
                queue: f.name("queue")?,
            }),
            CommandKind::Take => Command::Take(Take {
                lock: f.lock()?,
                manager: f.required_name("manager")?,
                job: f.number("job")?,
                attempt: f.attempt()?,
                queue: f.required_name("queue")?,
                timeout_ms: f.number("timeout")?,
                body: payload,
            }),
            CommandKind::No => Command::No(No {
                lock: f.lock()?,
                manager: f.name("manager")?,
            }),
            CommandKind::Done => {
                let manager = f.required_name("manager")?;
                let job = f.number("job")?;
                let attempt = f.attempt()?;
                let status = Status::parse(f.required("status")?)
                    .ok_or(DecodeError::BadHeaderValue("status"))?;
                Command::Done(Done {
                    manager,
                    job,
                    attempt,
                    status,
                    error: f.name("error")?,
                    result: payload,
                })
            }
            CommandKind::Status => Command::Status(Progress {
                manager: f.required_name("manager")?,
                job: f.number("job")?,
                attempt: f.attempt()?,
                num: f.optional_number("num")?,
                den: f.optional_number("den")?,
            }),
            CommandKind::Cancel => Command::Cancel(Cancel {
                manager: f.required_name("manager")?,
                job: f.number("job")?,
                attempt: f.attempt()?,
            }),
        })
    }
}

/// Reads typed values out of parsed headers and remembers which keys were used, so the
/// rest can be kept as extras. The used keys are a fixed array, not a `Vec`: one
/// allocation less per decoded message.
struct Fields<'a> {
    headers: &'a Headers,
    used: [&'static str; MAX_DEFINED_KEYS],
    used_count: usize,
}

impl<'a> Fields<'a> {
    fn new(headers: &'a Headers) -> Self {
        Fields {
            headers,
            used: [""; MAX_DEFINED_KEYS],
            used_count: 0,
        }
    }

    fn raw(&mut self, key: &'static str) -> Option<&'a str> {
        debug_assert!(self.used_count < MAX_DEFINED_KEYS, "raise MAX_DEFINED_KEYS");
        if let Some(slot) = self.used.get_mut(self.used_count) {
            *slot = key;
            self.used_count += 1;
        }
        self.headers.get(key)
    }

    fn required(&mut self, key: &'static str) -> Result<&'a str, DecodeError> {
        self.raw(key).ok_or(DecodeError::MissingHeader(key))
    }

    /// A name-like value (queue, manager, worker, error code): present means non-empty.
    fn name(&mut self, key: &'static str) -> Result<Option<String>, DecodeError> {
        match self.raw(key) {
            None => Ok(None),
            Some("") => Err(DecodeError::BadHeaderValue(key)),
            Some(v) => Ok(Some(v.to_owned())),
        }
    }

    fn required_name(&mut self, key: &'static str) -> Result<String, DecodeError> {
        self.name(key)?.ok_or(DecodeError::MissingHeader(key))
    }

    /// A comma-separated list of non-empty names; present means at least one.
    fn list(&mut self, key: &'static str) -> Result<Option<Vec<String>>, DecodeError> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => {
                let items: Vec<String> = v.split(',').map(str::to_owned).collect();
                if items.iter().any(String::is_empty) {
                    return Err(DecodeError::BadHeaderValue(key));
                }
                Ok(Some(items))
            }
        }
    }

    /// The lock: an opaque, non-empty token of at most [`MAX_LOCK_LEN`] bytes.
    fn lock(&mut self) -> Result<String, DecodeError> {
        let v = self.required("lock")?;
        if v.is_empty() || v.len() > MAX_LOCK_LEN {
            return Err(DecodeError::BadHeaderValue("lock"));
        }
        Ok(v.to_owned())
    }

    fn number(&mut self, key: &'static str) -> Result<u64, DecodeError> {
        self.optional_number(key)?
            .ok_or(DecodeError::MissingHeader(key))
    }

    fn optional_number(&mut self, key: &'static str) -> Result<Option<u64>, DecodeError> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => parse_decimal(v)
                .map(Some)
                .ok_or(DecodeError::BadHeaderValue(key)),
        }
    }

    fn attempt(&mut self) -> Result<u64, DecodeError> {
        match self.number("attempt")? {
            0 => Err(DecodeError::BadHeaderValue("attempt")),
            n => Ok(n),
        }
    }

    fn leftover(&self) -> Headers {
        let mut extra = Headers::new();
        for (k, v) in self.headers.iter() {
            if !self.used[..self.used_count].contains(&k) {
                extra.push(k, v);
            }
        }
        extra
    }
}

/// ASCII decimal digits only (no sign, no spaces), fitting in a u64.
pub fn parse_decimal(v: &str) -> Option<u64> {
    if v.is_empty() || v.len() > 20 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}
