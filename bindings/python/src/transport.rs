//! Requests to the server's routes in-process: `ferrox.Llama` speaks the OpenAI API (what
//! llama-cpp-python returns is OpenAI-shaped) to ferrox-server's router without a socket, so
//! validation, chat templates, tools, structured output, log-probabilities and the engine
//! loop are the server's own. Responses arrive on a channel that the calling Python thread
//! waits on with the GIL released, checking for signals every [`POLL`]; dropping the channel
//! (an abandoned stream, a `KeyboardInterrupt`) drops the response body, and the scheduler
//! cancels a generation whose client went away.

use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use futures_util::StreamExt;
use pyo3::exceptions::{PyRuntimeError, PyStopIteration};
use pyo3::prelude::*;
use tower::ServiceExt;

/// How often a waiting thread looks for Ctrl-C.
const POLL: Duration = Duration::from_millis(50);

/// What the request task sends back.
pub enum Piece {
    Status(u16),
    Data(Vec<u8>),
    Failed(String),
}

/// A request running on the runtime: its answer's pieces arrive on `rx`. Dropping it aborts the
/// request's task, which drops the route's handler and with it the generation's events: the
/// scheduler cancels the generation at its next step (a whole answer is only sent at its end,
/// so a dropped channel alone would not stop it).
pub struct Pending {
    rx: Mutex<Receiver<Piece>>,
    task: tokio::task::AbortHandle,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sends `body` to `path` on `router` from a task on `rt`.
pub fn start(
    rt: &tokio::runtime::Runtime,
    router: &axum::Router,
    path: &str,
    body: String,
) -> Pending {
    let (tx, rx) = channel();
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body));
    let router = router.clone();
    let task = rt.spawn(async move {
        let request = match request {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Piece::Failed(e.to_string()));
                return;
            }
        };
        let Ok(response) = router.oneshot(request).await;
        if tx.send(Piece::Status(response.status().as_u16())).is_err() {
            return;
        }
        let mut data = response.into_body().into_data_stream();
        while let Some(chunk) = data.next().await {
            let piece = match chunk {
                Ok(bytes) => Piece::Data(bytes.to_vec()),
                Err(e) => Piece::Failed(e.to_string()),
            };
            // The reader is gone: dropping the body ends the generation.
            if tx.send(piece).is_err() {
                return;
            }
        }
    });
    Pending {
        rx: Mutex::new(rx),
        task: task.abort_handle(),
    }
}

/// The next piece, waiting with the GIL released; `None` once the answer is complete.
/// A signal handler's exception (Ctrl-C: `KeyboardInterrupt`) ends the wait.
pub fn next(py: Python<'_>, rx: &Mutex<Receiver<Piece>>) -> PyResult<Option<Piece>> {
    loop {
        let got = py.detach(|| {
            let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
            rx.recv_timeout(POLL)
        });
        match got {
            Ok(Piece::Failed(e)) => return Err(PyRuntimeError::new_err(e)),
            Ok(piece) => return Ok(Some(piece)),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(RecvTimeoutError::Disconnected) => return Ok(None),
        }
    }
}

/// A whole answer: its status and body.
pub fn collect(py: Python<'_>, pending: Pending) -> PyResult<(u16, String)> {
    let mut status = 0;
    let mut body = Vec::new();
    while let Some(piece) = next(py, &pending.rx)? {
        match piece {
            Piece::Status(s) => status = s,
            Piece::Data(d) => body.extend_from_slice(&d),
            Piece::Failed(_) => unreachable!("next returns failures as errors"),
        }
    }
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A streamed answer (server-sent events): iterates over each event's `data` payload (a JSON
/// text) until `[DONE]`. An answer that is not a stream (an error status) is read whole by
/// [`Stream::status`] first.
#[pyclass(module = "ferrox._native")]
pub struct Stream {
    /// None once closed.
    pending: Option<Pending>,
    status: Option<u16>,
    /// Bytes of an event not yet complete.
    buf: Vec<u8>,
    /// Complete events not yet returned.
    ready: std::collections::VecDeque<String>,
    done: bool,
}

impl Stream {
    pub fn new(pending: Pending) -> Stream {
        Stream {
            pending: Some(pending),
            status: None,
            buf: Vec::new(),
            ready: Default::default(),
            done: false,
        }
    }

    /// The next piece of the answer; `None` at its end or once closed.
    fn next_piece(&mut self, py: Python<'_>) -> PyResult<Option<Piece>> {
        match &self.pending {
            Some(p) => next(py, &p.rx),
            None => Ok(None),
        }
    }

    /// Moves complete events from `buf` to `ready`.
    fn split_events(&mut self) {
        while let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = self.buf.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&event);
            let data: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if data.is_empty() {
                continue;
            }
            let data = data.join("\n");
            if data == "[DONE]" {
                self.done = true;
                return;
            }
            self.ready.push_back(data);
        }
    }
}

#[pymethods]
impl Stream {
    /// The HTTP status of the answer (waits for it).
    fn status(&mut self, py: Python<'_>) -> PyResult<u16> {
        while self.status.is_none() {
            match self.next_piece(py)? {
                Some(Piece::Status(s)) => self.status = Some(s),
                Some(Piece::Data(d)) => self.buf.extend_from_slice(&d),
                Some(Piece::Failed(_)) => unreachable!("next returns failures as errors"),
                None => return Err(PyRuntimeError::new_err("the answer ended without a status")),
            }
        }
        Ok(self.status.unwrap_or(0))
    }

    /// Everything not yet read, as text (an error answer's body).
    fn read(&mut self, py: Python<'_>) -> PyResult<String> {
        self.status(py)?;
        while let Some(piece) = self.next_piece(py)? {
            if let Piece::Data(d) = piece {
                self.buf.extend_from_slice(&d);
            }
        }
        Ok(String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned())
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<String> {
        if self.pending.is_none() {
            return Err(PyStopIteration::new_err(()));
        }
        self.status(py)?;
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Ok(event);
            }
            if self.done {
                return Err(PyStopIteration::new_err(()));
            }
            match self.next_piece(py)? {
                Some(Piece::Data(d)) => {
                    self.buf.extend_from_slice(&d);
                    self.split_events();
                }
                Some(_) => {}
                None => self.done = true,
            }
        }
    }

    /// Stops the generation now (the engine cancels it at its next step).
    fn close(&mut self) {
        self.pending = None;
        self.done = true;
        self.ready.clear();
    }
}
