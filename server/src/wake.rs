//! Futures raced against a busy stream, polled only when they were woken: a wait for a rare
//! event (a cancel, the server stopping, a time limit) then costs an atomic swap on each of
//! the stream's wake-ups instead of a lock on a token every task shares.
use futures::task::AtomicWaker;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// `fut`, polled the first time and afterwards only once its own waker has fired.
pub struct WhenWoken<F> {
    fut: Pin<Box<F>>,
    flag: Arc<Flag>,
    waker: Waker,
}

struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F: Future> WhenWoken<F> {
    pub fn new(fut: F) -> Self {
        let flag = Arc::new(Flag {
            // The first poll goes through.
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        WhenWoken {
            fut: Box::pin(fut),
            waker: Waker::from(flag.clone()),
            flag,
        }
    }
}

impl<F> WhenWoken<F> {
    /// The future itself, to change it (a timer's deadline); it is polled again next time.
    pub fn get_mut(&mut self) -> Pin<&mut F> {
        self.flag.woken.store(true, Ordering::Release);
        self.fut.as_mut()
    }
}

impl<F: Future> Future for WhenWoken<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        // Registered before the flag is read, so a wake in between is not lost.
        this.flag.task.register(cx.waker());
        if !this.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.fut
            .as_mut()
            .poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn resolves_when_its_future_does_and_not_before() {
        let token = tokio_util::sync::CancellationToken::new();
        let mut waiting = WhenWoken::new(token.clone().cancelled_owned());
        // Polled many times while nothing happened: still pending.
        for _ in 0..3 {
            assert!(futures::poll!(&mut waiting).is_pending());
        }
        let canceller = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            canceller.cancel();
        });
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the cancel wakes it");
    }

    #[tokio::test]
    async fn a_timer_moved_on_fires_at_its_new_deadline() {
        let start = tokio::time::Instant::now();
        let mut timer = WhenWoken::new(tokio::time::sleep(Duration::from_millis(10)));
        assert!(futures::poll!(&mut timer).is_pending());
        timer.get_mut().reset(start + Duration::from_millis(150));
        (&mut timer).await;
        assert!(
            start.elapsed() >= Duration::from_millis(150),
            "fired at the old deadline"
        );
    }
}
