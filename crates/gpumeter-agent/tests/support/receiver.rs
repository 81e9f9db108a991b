//! A loopback-only HTTP receiver of usage events for tests, with fault modes.
//!
//! It speaks just enough HTTP/1.1 (one request per connection, `Content-Length` bodies) to
//! take the three formats the agent sends: CloudEvents batches
//! (`application/cloudevents-batch+json`, ids in `id`), Lago batches (`{"events": [...]}`,
//! ids in `transaction_id`) and Stripe forms (`identifier`). It records every request,
//! deduplicates events by id the way OpenMeter, Stripe and Lago do (the first one is kept),
//! and records a *violation* whenever an id arrives again with another payload, or an event
//! lacks its receiver's required fields: tests assert [`Receiver::violations`] is empty.
//!
//! Faults, by the request's number `n` (from 1, counted as connections are accepted, so they
//! are deterministic): every `drop_every`th request is read whole, its events kept, and the
//! connection closed without an answer; every `slow_every`th is kept and answered after
//! `slow_for` (longer than the client's timeout); every `fail_every`th is answered 500 and not
//! kept; a request carrying an id of `reject_ids` is answered 400. [`Receiver::down`] stops
//! listening (connections are refused) until [`Receiver::up`].
//!
//! Include it with `#[path = "support/receiver.rs"] mod receiver;`.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The fault modes (all off by default).
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Answer 500 to every `n`th request (0: never).
    pub fail_every: u64,
    /// Answer every `n`th request after `slow_for` (0: never); its events are kept.
    pub slow_every: u64,
    /// How long a slow answer waits.
    pub slow_for: Duration,
    /// Read every `n`th request whole, keep its events, and close without answering (0: never).
    pub drop_every: u64,
    /// Answer 400 to a request carrying any of these ids.
    pub reject_ids: BTreeSet<String>,
}

/// How a request was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// 200, events kept.
    Ok,
    /// 500, events not kept.
    Failed,
    /// 200 after `slow_for`, events kept.
    Slow,
    /// No answer, events kept.
    Dropped,
    /// 400, events not kept.
    Rejected,
    /// 400: a request that is not what any receiver takes (a violation is recorded).
    Malformed,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Its number, from 1.
    pub n: u64,
    /// The request target (path and query).
    pub path: String,
    /// `Content-Type`.
    pub content_type: String,
    /// `Authorization`, if any.
    pub authorization: Option<String>,
    /// The body.
    pub body: Vec<u8>,
    /// The ids of its events.
    pub ids: Vec<String>,
    /// The answer.
    pub answer: Answer,
}

#[derive(Default)]
struct Inner {
    faults: Faults,
    down: bool,
    listening: bool,
    shutdown: bool,
    accepted: u64,
    finished: u64,
    requests: Vec<Recorded>,
    events: BTreeMap<String, String>,
    arrivals: BTreeMap<String, usize>,
    violations: Vec<String>,
}

struct Shared {
    inner: Mutex<Inner>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait_while(&self, mut cond: impl FnMut(&Inner) -> bool) {
        let mut g = self.lock();
        while cond(&g) {
            g = self.changed.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// The receiver; stops when dropped.
pub struct Receiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Receiver {
    /// A receiver on `127.0.0.1` (a free port) with `faults`, listening when this returns.
    pub fn start(faults: Faults) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                faults,
                listening: true,
                ..Inner::default()
            }),
            changed: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::spawn(move || serve(listener, addr, &s));
        Receiver {
            addr,
            shared,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Replaces the fault modes.
    pub fn set_faults(&self, faults: Faults) {
        self.shared.lock().faults = faults;
    }

    /// Stops listening: connections are refused until [`up`](Self::up). Returns once the
    /// listening socket is closed.
    pub fn down(&self) {
        self.shared.lock().down = true;
        // Wake the accept loop (this connection is not counted).
        let _ = TcpStream::connect(self.addr);
        self.shared.wait_while(|i| i.listening);
    }

    /// Listens again on the same port; returns once listening.
    pub fn up(&self) {
        self.shared.lock().down = false;
        self.shared.changed.notify_all();
        self.shared.wait_while(|i| !i.listening);
    }

    /// The events kept, deduplicated by id: id → payload (the first one received).
    pub fn events(&self) -> BTreeMap<String, String> {
        self.shared.lock().events.clone()
    }

    /// How many times each id was kept (before deduplication).
    pub fn arrivals(&self) -> BTreeMap<String, usize> {
        self.shared.lock().arrivals.clone()
    }

    /// Every request so far, in the order they were answered.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().requests.clone()
    }

    /// What broke the receivers' rules: an id again with another payload, a malformed
    /// request, an event lacking a required field. Empty in a good run.
    pub fn violations(&self) -> Vec<String> {
        self.shared.lock().violations.clone()
    }

    /// Waits until every connection accepted so far is finished (the slow ones finish after
    /// the client gave up on them).
    pub fn wait_idle(&self) {
        self.shared.wait_while(|i| i.finished < i.accepted);
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        {
            let mut g = self.shared.lock();
            g.shutdown = true;
            g.down = false;
        }
        self.shared.changed.notify_all();
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The accept loop: one thread per connection; closes and re-opens the listener for
/// [`Receiver::down`] and [`Receiver::up`].
fn serve(first: TcpListener, addr: SocketAddr, shared: &Arc<Shared>) {
    let mut listener = Some(first);
    loop {
        let l = match listener.take() {
            Some(l) => l,
            None => {
                shared.wait_while(|i| i.down && !i.shutdown);
                if shared.lock().shutdown {
                    return;
                }
                let l = bind_again(addr);
                shared.lock().listening = true;
                shared.changed.notify_all();
                l
            }
        };
        for conn in l.incoming() {
            let n = {
                let mut g = shared.lock();
                if g.shutdown || g.down {
                    break;
                }
                g.accepted += 1;
                g.accepted
            };
            match conn {
                Ok(stream) => {
                    let s = Arc::clone(shared);
                    std::thread::spawn(move || {
                        handle(stream, n, &s);
                        s.lock().finished += 1;
                        s.changed.notify_all();
                    });
                }
                Err(_) => shared.lock().finished += 1,
            }
        }
        drop(l);
        let shutdown = {
            let mut g = shared.lock();
            g.listening = false;
            g.shutdown
        };
        shared.changed.notify_all();
        if shutdown {
            return;
        }
    }
}

/// Binds `addr` again (retrying for a few seconds while the port is busy).
fn bind_again(addr: SocketAddr) -> TcpListener {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpListener::bind(addr) {
            Ok(l) => return l,
            Err(e) if Instant::now() > deadline => panic!("cannot listen on {addr} again: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// A parsed request.
struct Parsed {
    path: String,
    content_type: String,
    authorization: Option<String>,
    body: Vec<u8>,
}

/// Reads one request: request line, headers, a `Content-Length` body.
fn read_request(stream: &TcpStream) -> Result<Parsed, String> {
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    if r.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
        // A connection closed before its request: nothing to answer.
        return Err(String::new());
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    if method != "POST" {
        return Err(format!("method `{method}`, not POST"));
    }
    let (mut content_type, mut authorization, mut length) = (String::new(), None, None);
    loop {
        line.clear();
        r.read_line(&mut line).map_err(|e| e.to_string())?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let Some((name, value)) = l.split_once(':') else {
            return Err(format!("header line `{l}`"));
        };
        let value = value.trim().to_string();
        match name.to_ascii_lowercase().as_str() {
            "content-type" => content_type = value,
            "authorization" => authorization = Some(value),
            "content-length" => length = value.parse::<usize>().ok(),
            "transfer-encoding" => return Err("a chunked body".to_string()),
            _ => {}
        }
    }
    let length = length.ok_or("no Content-Length")?;
    let mut body = vec![0; length];
    r.read_exact(&mut body).map_err(|e| e.to_string())?;
    Ok(Parsed {
        path,
        content_type,
        authorization,
        body,
    })
}

/// The events of a body, as (id, payload), by content type.
fn events_of(content_type: &str, body: &[u8]) -> Result<Vec<(String, String)>, String> {
    let json = || serde_json::from_slice::<serde_json::Value>(body).map_err(|e| e.to_string());
    let objects = |v: &serde_json::Value, key: &str, required: &[&str]| {
        let arr = v.as_array().ok_or("not a JSON array")?;
        arr.iter()
            .map(|e| {
                for f in required {
                    if e.get(f).is_none() {
                        return Err(format!("an event without `{f}`: {e}"));
                    }
                }
                let id = e[key].as_str().ok_or(format!("`{key}` not a string"))?;
                Ok((id.to_string(), e.to_string()))
            })
            .collect()
    };
    match content_type {
        "application/cloudevents-batch+json" => objects(
            &json()?,
            "id",
            &[
                "specversion",
                "id",
                "source",
                "type",
                "subject",
                "time",
                "data",
            ],
        ),
        "application/json" => objects(
            json()?.get("events").ok_or("no `events`")?,
            "transaction_id",
            &[
                "transaction_id",
                "external_subscription_id",
                "code",
                "timestamp",
                "properties",
            ],
        ),
        "application/x-www-form-urlencoded" => {
            let fields: BTreeMap<String, String> =
                url::form_urlencoded::parse(body).into_owned().collect();
            for f in [
                "event_name",
                "identifier",
                "timestamp",
                "payload[stripe_customer_id]",
                "payload[value]",
            ] {
                if !fields.contains_key(f) {
                    return Err(format!("a Stripe form without `{f}`"));
                }
            }
            let text = String::from_utf8_lossy(body).into_owned();
            Ok(vec![(fields["identifier"].clone(), text)])
        }
        other => Err(format!("content type `{other}`")),
    }
}

/// Answers one connection.
fn handle(mut stream: TcpStream, n: u64, shared: &Shared) {
    let parsed = match read_request(&stream) {
        Ok(p) => p,
        // A client that gave up before sending it all: nothing to record.
        Err(e) if e.contains("failed to fill") || e.is_empty() => return,
        Err(e) => {
            shared.lock().violations.push(format!("request {n}: {e}"));
            let _ = respond(&mut stream, 400);
            return;
        }
    };
    let events = events_of(&parsed.content_type, &parsed.body);
    let faults = shared.lock().faults.clone();
    let answer = match &events {
        Err(_) => Answer::Malformed,
        Ok(_) if faults.drop_every > 0 && n.is_multiple_of(faults.drop_every) => Answer::Dropped,
        Ok(_) if faults.slow_every > 0 && n.is_multiple_of(faults.slow_every) => Answer::Slow,
        Ok(_) if faults.fail_every > 0 && n.is_multiple_of(faults.fail_every) => Answer::Failed,
        Ok(ev) if ev.iter().any(|(id, _)| faults.reject_ids.contains(id)) => Answer::Rejected,
        Ok(_) => Answer::Ok,
    };
    let kept = matches!(answer, Answer::Ok | Answer::Slow | Answer::Dropped);
    {
        let mut g = shared.lock();
        match &events {
            Err(e) => g.violations.push(format!("request {n}: {e}")),
            Ok(ev) if kept => {
                for (id, payload) in ev {
                    *g.arrivals.entry(id.clone()).or_default() += 1;
                    match g.events.get(id) {
                        Some(first) if first != payload => {
                            let v = format!("id {id} again with another payload:\n first: {first}\n now:   {payload}");
                            g.violations.push(v);
                        }
                        Some(_) => {}
                        None => {
                            g.events.insert(id.clone(), payload.clone());
                        }
                    }
                }
            }
            Ok(_) => {}
        }
    }
    match answer {
        Answer::Ok => {
            let _ = respond(&mut stream, 200);
        }
        Answer::Slow => {
            std::thread::sleep(faults.slow_for);
            let _ = respond(&mut stream, 200);
        }
        Answer::Failed => {
            let _ = respond(&mut stream, 500);
        }
        Answer::Rejected | Answer::Malformed => {
            let _ = respond(&mut stream, 400);
        }
        Answer::Dropped => {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
    drop(stream);
    let mut g = shared.lock();
    g.requests.push(Recorded {
        n,
        path: parsed.path,
        content_type: parsed.content_type,
        authorization: parsed.authorization,
        body: parsed.body,
        ids: events
            .map(|e| e.into_iter().map(|(id, _)| id).collect())
            .unwrap_or_default(),
        answer,
    });
    drop(g);
    shared.changed.notify_all();
}

/// Writes a response with a short JSON body and closes the connection.
fn respond(stream: &mut TcpStream, status: u16) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        _ => "Internal Server Error",
    };
    let body = format!("{{\"status\":{status}}}");
    write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}
