//! The endpoint's bounds and methods: idle and trickling clients cannot hold it, heads are
//! capped, HEAD and other methods, unknown paths.

use std::io::{ErrorKind, Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::*;

/// A generous bound for "the server is stuck", never a performance measure.
const STUCK: Duration = Duration::from_secs(10);

/// A server on a free loopback port, with `limits`, over a temporary spool and state folder.
fn server(limits: Limits) -> (MetricsServer, Arc<Metrics>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Arc::new(Metrics::new(1000, dir.path()));
    let ready = Readiness {
        spool: dir.path().to_path_buf(),
        state_dir: dir.path().to_path_buf(),
        max_step_age: Duration::from_secs(3600),
    };
    let addr = "127.0.0.1:0".parse().expect("addr");
    let s = MetricsServer::start_with(addr, Arc::clone(&m), ready, limits).expect("bind");
    (s, m, dir)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, STUCK).expect("connect");
    s.set_read_timeout(Some(STUCK)).expect("timeout");
    s
}

/// Everything the server sends on `s` until it closes; panics if it does not close within
/// [`STUCK`]. A reset counts as closed.
fn read_to_close(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("the server kept the connection open past {STUCK:?}")
            }
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Sends `request` as is and returns the whole answer.
fn raw(addr: SocketAddr, request: &str) -> String {
    let mut s = connect(addr);
    s.write_all(request.as_bytes()).expect("write");
    read_to_close(&mut s)
}

fn request(method: &str, path: &str) -> String {
    format!("{method} {path} HTTP/1.1\r\nHost: agent\r\n\r\n")
}

fn status(answer: &str) -> &str {
    answer.split(' ').nth(1).unwrap_or("")
}

#[test]
fn head_answers_the_headers_only_other_methods_get_405_and_unknown_paths_404() {
    let (s, _m, _dir) = server(Limits::default());
    let addr = s.addr();
    assert!(s.is_alive());
    for path in ["/metrics", "/healthz", "/readyz"] {
        let get = raw(addr, &request("GET", path));
        let head = raw(addr, &request("HEAD", path));
        let (get_head, body) = get.split_once("\r\n\r\n").expect("a head");
        assert!(!body.is_empty(), "{get}");
        // The same status and headers (Content-Length the body's), nothing after them.
        assert_eq!(head, format!("{get_head}\r\n\r\n"), "HEAD {path}");
        assert!(get_head.contains("Connection: close"), "{get}");
        for method in ["POST", "PUT", "DELETE"] {
            let a = raw(addr, &request(method, path));
            assert_eq!(status(&a), "405", "{method} {path}: {a}");
            assert!(a.contains("\r\nAllow: GET, HEAD\r\n"), "{a}");
        }
    }
    for (method, path) in [("GET", "/"), ("GET", "/metricsx"), ("POST", "/nothing")] {
        let a = raw(addr, &request(method, path));
        assert_eq!(status(&a), "404", "{method} {path}: {a}");
    }
    // The query is not part of the path.
    assert_eq!(status(&raw(addr, &request("GET", "/healthz?x=1"))), "200");
    // Not HTTP: 400.
    assert_eq!(status(&raw(addr, "HELLO\x01\r\n\r\n")), "400");
    s.stop();
}

#[test]
fn an_oversized_head_is_refused_and_the_accept_header_is_read() {
    let limits = Limits {
        max_head_bytes: 1024,
        ..Limits::default()
    };
    let (s, _m, _dir) = server(limits);
    let big = format!(
        "GET /metrics HTTP/1.1\r\nHost: agent\r\nX-Filler: {}\r\n\r\n",
        "a".repeat(4096)
    );
    let a = raw(s.addr(), &big);
    assert_eq!(status(&a), "431", "{a}");
    let many: String = (0..100).map(|i| format!("X-{i}: 1\r\n")).collect();
    let a = raw(s.addr(), &format!("GET /metrics HTTP/1.1\r\n{many}\r\n"));
    assert_eq!(status(&a), "431", "{a}");
    let om =
        "GET /metrics HTTP/1.1\r\naccept: text/plain;q=0.5, application/openmetrics-text\r\n\r\n";
    let a = raw(s.addr(), om);
    assert!(a.contains(super::super::OPENMETRICS_CONTENT_TYPE), "{a}");
    assert!(a.ends_with("# EOF\n"), "{a}");
    let prom = "GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;Q=0\r\n\r\n";
    let a = raw(s.addr(), prom);
    assert!(a.contains(super::super::PROMETHEUS_CONTENT_TYPE), "{a}");
}

#[test]
fn idle_and_trickling_connections_cannot_hold_the_endpoint() {
    let limits = Limits {
        workers: 2,
        queue: 4,
        read_timeout: Duration::from_millis(300),
        write_timeout: Duration::from_secs(1),
        max_head_bytes: 16 * 1024,
    };
    let (s, _m, _dir) = server(limits);
    let addr = s.addr();
    let mut idle: Vec<TcpStream> = (0..300).map(|_| connect(addr)).collect();
    let mut half = connect(addr);
    half.write_all(b"GET /metrics HTTP/1.1\r\nHost: ag")
        .expect("half a head");
    // A scrape gets through while they stay open: a 503 (queue full) is retried, as
    // Prometheus retries at its next scrape.
    let deadline = Instant::now() + STUCK;
    let mut last = String::new();
    while Instant::now() < deadline {
        last = raw(addr, &request("GET", "/metrics"));
        if status(&last) == "200" {
            break;
        }
        assert_eq!(status(&last), "503", "{last}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        status(&last),
        "200",
        "no scrape answered within {STUCK:?}: {last}"
    );
    assert!(last.contains("gpumeter_usage_total"), "{last}");
    // Each idle connection is closed by the server: at once with a 503, or after the read
    // timeout with nothing.
    for c in idle.iter_mut().chain([&mut half]) {
        let a = read_to_close(c);
        assert!(a.is_empty() || status(&a) == "503", "{a}");
    }
    drop(idle);
    drop(half);
    assert_eq!(status(&raw(addr, &request("GET", "/healthz"))), "200");
    assert!(s.is_alive());
    s.stop();
    assert!(
        TcpStream::connect(addr).is_err(),
        "still listening after stop"
    );
}
