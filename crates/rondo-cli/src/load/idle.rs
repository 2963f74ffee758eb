//! Idle clients (`--idle-clients N`): open a stream, read its response
//! headers, then never read again and hold the connection until the run
//! ends — the slow or dead client a server must survive.
//!
//! They speak HTTP/1.1 over a plain socket rather than through reqwest so
//! that the receive buffer can be made small before connecting (SO_RCVBUF);
//! otherwise the kernel would quietly read a short title into a large
//! loopback buffer and the client would not be idle from the server's point
//! of view. Nothing is read after the header block (one read may also take
//! the first bytes of the body, if they were already there).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// SO_RCVBUF of an idle client's socket (the kernel doubles it and keeps
/// a minimum of its own).
pub const IDLE_RECV_BUFFER_BYTES: u32 = 4096;
/// Longest response header block an idle client accepts.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// How an idle client ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdleOutcome {
    /// Admitted (200) and held, unread, until the run ended.
    Held,
    Rejected,
    Error,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IdleRecord {
    pub index: usize,
    pub title_id: u64,
    pub outcome: IdleOutcome,
    pub http_status: Option<u16>,
    /// From the request to the end of the response headers.
    pub headers_ms: Option<f64>,
    pub retry_after_s: Option<u64>,
    pub reject_reason: Option<String>,
    pub error: Option<String>,
}

/// Opens one idle stream of `stream_url`. Returns its record and, when
/// it was admitted, the connection, which the caller holds unread until the
/// run ends (dropping it closes the connection).
pub async fn open_idle(
    index: usize,
    title_id: u64,
    stream_url: &str,
    header_timeout: Duration,
) -> (IdleRecord, Option<TcpStream>) {
    let mut record = IdleRecord {
        index,
        title_id,
        outcome: IdleOutcome::Error,
        http_status: None,
        headers_ms: None,
        retry_after_s: None,
        reject_reason: None,
        error: None,
    };
    let opened = tokio::time::timeout(header_timeout, open(stream_url)).await;
    let (socket, head, body_start, requested_at) = match opened {
        Err(_) => {
            record.error = Some(format!("no response headers within {header_timeout:?}"));
            return (record, None);
        }
        Ok(Err(message)) => {
            record.error = Some(message);
            return (record, None);
        }
        Ok(Ok(opened)) => opened,
    };
    record.headers_ms = Some(requested_at.elapsed().as_secs_f64() * 1e3);
    let status = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse::<u16>().ok());
    record.http_status = status;
    match status {
        Some(200) => {
            record.outcome = IdleOutcome::Held;
            return (record, Some(socket));
        }
        Some(503) => {
            record.outcome = IdleOutcome::Rejected;
            record.retry_after_s = header(&head, "retry-after").and_then(|v| v.parse().ok());
            let length: usize = header(&head, "content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
                .min(MAX_HEAD_BYTES);
            let body = tokio::time::timeout(header_timeout, read_body(socket, body_start, length))
                .await
                .unwrap_or_default();
            if let Ok(json) = serde_json::from_slice::<serde_json::Value>(&body) {
                record.reject_reason = json["reason"].as_str().map(str::to_string);
                record.error = json["error"].as_str().map(str::to_string);
            }
        }
        other => {
            record.error = Some(match other {
                Some(code) => format!("stream request answered {code}"),
                None => "the response does not start with an HTTP status line".into(),
            });
        }
    }
    (record, None)
}

/// Connects with a small receive buffer, sends the GET and reads the header
/// block. Returns the socket, the header text, any body bytes read with it,
/// and when the request was sent.
async fn open(stream_url: &str) -> Result<(TcpStream, String, Vec<u8>, Instant), String> {
    let url = reqwest::Url::parse(stream_url).map_err(|e| format!("{stream_url}: {e}"))?;
    if url.scheme() != "http" {
        return Err(format!("{stream_url}: idle clients speak plain http only"));
    }
    let host = url.host_str().ok_or(format!("{stream_url}: no host"))?;
    let port = url.port_or_known_default().unwrap_or(80);
    let address = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("resolving {host}: {e}"))?
        .next()
        .ok_or(format!("{host} resolves to no address"))?;
    let socket = if address.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| format!("socket: {e}"))?;
    socket
        .set_recv_buffer_size(IDLE_RECV_BUFFER_BYTES)
        .map_err(|e| format!("SO_RCVBUF: {e}"))?;
    let mut stream = socket
        .connect(address)
        .await
        .map_err(|e| format!("connecting to {address}: {e}"))?;
    let host_header = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    let target = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_string(),
    };
    let request = format!(
        "GET {target} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: rondo-load (idle)\r\n\r\n"
    );
    let requested_at = Instant::now();
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("sending the request: {e}"))?;
    let mut buf = Vec::with_capacity(1024);
    let mut piece = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let body = buf[end + 4..].to_vec();
            return Ok((stream, head, body, requested_at));
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(format!(
                "response headers longer than {MAX_HEAD_BYTES} bytes"
            ));
        }
        let n = stream
            .read(&mut piece)
            .await
            .map_err(|e| format!("reading the response: {e}"))?;
        if n == 0 {
            return Err("the server closed the connection before its headers".into());
        }
        buf.extend_from_slice(&piece[..n]);
    }
}

/// A header's value (first occurrence, case-insensitive name).
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Reads a small body of `length` bytes (a 503's JSON reason).
async fn read_body(mut stream: TcpStream, mut body: Vec<u8>, length: usize) -> Vec<u8> {
    let mut piece = [0u8; 1024];
    while body.len() < length {
        match stream.read(&mut piece).await {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&piece[..n]),
        }
    }
    body.truncate(length);
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_found_case_insensitively() {
        let head = "HTTP/1.1 503 Service Unavailable\r\nretry-after: 5\r\nContent-Length: 12";
        assert_eq!(header(head, "Retry-After"), Some("5"));
        assert_eq!(header(head, "content-length"), Some("12"));
        assert_eq!(header(head, "x-missing"), None);
    }
}
