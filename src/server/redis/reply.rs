//! Replies on their way back: what a queued command's reply is for, and
//! where a task waits for it.

use std::cell::RefCell;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

use crate::redis::resp::Reply;

/// What to do with a command's reply.
pub(crate) enum CmdKind {
    Publish(Option<Rc<ReplyWaiter>>),
    Canary,
    /// Any other command (cache GET/SET…): hand the reply to the waiter.
    Command(Rc<ReplyWaiter>),
}

/// Where a task waits for Redis to answer its command.
#[derive(Default)]
pub struct ReplyWaiter {
    reply: RefCell<Option<Result<Reply, String>>>,
    waker: RefCell<Option<Waker>>,
}

impl ReplyWaiter {
    pub(super) fn complete(&self, r: Result<Reply, String>) {
        *self.reply.borrow_mut() = Some(r);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Waits for the reply (an error reply becomes `Err` with its text).
    pub async fn wait(&self) -> Result<Reply, String> {
        poll_fn(|cx| match self.reply.borrow_mut().take() {
            Some(r) => Poll::Ready(r),
            None => {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}
