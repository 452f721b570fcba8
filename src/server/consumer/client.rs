//! The consumer thread's end of the socket pair to the worker: requests
//! written in the order they are made (the worker publishes them in that
//! order), replies matched to them by `seq`. When the worker's end
//! closes, every waiting request fails and so does every later one.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::rc::Rc;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{oneshot, Mutex};

use crate::consumer::bridge::{self, Reply, Request};

type Waiting = RefCell<HashMap<u64, oneshot::Sender<Reply>>>;

/// The bridge, shared by the thread's consumers.
pub struct Bridge {
    writer: Mutex<OwnedWriteHalf>,
    waiting: Rc<Waiting>,
    seq: Cell<u64>,
    closed: Rc<Cell<bool>>,
}

impl Bridge {
    /// Wraps the thread's end and starts reading replies.
    pub fn open(socket: StdUnixStream, max_message: usize) -> io::Result<Rc<Bridge>> {
        let (rd, wr) = tokio::net::UnixStream::from_std(socket)?.into_split();
        let waiting: Rc<Waiting> = Rc::default();
        let closed = Rc::new(Cell::new(false));
        tokio::task::spawn_local(read_replies(
            rd,
            waiting.clone(),
            closed.clone(),
            max_message,
        ));
        Ok(Rc::new(Bridge {
            writer: Mutex::new(wr),
            waiting,
            seq: Cell::new(0),
            closed,
        }))
    }

    /// Whether the worker's end is gone (the server is stopping).
    pub fn closed(&self) -> bool {
        self.closed.get()
    }

    /// Sends one publish request; its reply arrives on the receiver
    /// (dropped unanswered if the bridge closes).
    pub async fn send(&self, mut req: Request) -> io::Result<oneshot::Receiver<Reply>> {
        if self.closed.get() {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let seq = self.seq.get() + 1;
        self.seq.set(seq);
        req.seq = seq;
        let (tx, rx) = oneshot::channel();
        self.waiting.borrow_mut().insert(seq, tx);
        let mut frame = BytesMut::new();
        bridge::encode(&req, &mut frame);
        let mut w = self.writer.lock().await;
        if let Err(e) = w.write_all(&frame).await {
            self.waiting.borrow_mut().remove(&seq);
            return Err(e);
        }
        Ok(rx)
    }
}

async fn read_replies(
    mut rd: OwnedReadHalf,
    waiting: Rc<Waiting>,
    closed: Rc<Cell<bool>>,
    max_message: usize,
) {
    let mut buf = BytesMut::with_capacity(4096);
    'read: loop {
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        loop {
            match bridge::decode::<Reply>(&mut buf, max_message + bridge::OVERHEAD) {
                Ok(Some(r)) => {
                    if let Some(tx) = waiting.borrow_mut().remove(&r.seq) {
                        let _ = tx.send(r);
                    }
                }
                Ok(None) => break,
                Err(_) => break 'read,
            }
        }
    }
    closed.set(true);
    // Dropping the senders fails every request still waiting.
    waiting.borrow_mut().clear();
}
