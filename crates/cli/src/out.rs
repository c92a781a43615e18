//! Standard output and error that a closed pipe cannot crash.
//!
//! `clawctx doctor | head -2` closes the pipe while clawctx still prints. The Rust runtime
//! ignores SIGPIPE, so the write fails with `EPIPE`, and std's `println!` panics on any write
//! error ("failed printing to stdout: Broken pipe", with a backtrace). Two ways out were
//! possible:
//!
//! - restoring SIGPIPE's default action at start, so the kernel kills the process on the first
//!   write to a closed pipe, as it does a C program. Unsound here: the same signal is raised by
//!   a write to a plugin's stdin after the plugin died, or to a client's socket, and clawctx
//!   must survive both (quarantine the plugin, drop the client) — a signal cannot tell the
//!   pipes apart. (It would also need `unsafe`, which the workspace forbids.)
//! - handling `BrokenPipe` where stdout is written. That is this module: the crate root shadows
//!   `println!`, `print!` and `eprintln!` with macros that call [`print_out`] and [`print_err`].
//!   A write that fails because the reader went away marks stdout closed; later output is
//!   dropped, and the command runs to its end as it would have (stores flushed, plugin
//!   processes shut down), then exits with its own status. Commands that write to
//!   `std::io::stdout()` directly get the error back; `main` ends quietly when an error's root
//!   cause is a broken pipe and stdout really has no reader any more ([`stdout_closed`]), so a
//!   broken pipe to a plugin is still reported.

use std::fmt::Arguments;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes to stdout; after the reader closed the pipe, drops the text. Any other write error
/// (a full disk behind `> file`) is reported once on stderr and output stops, rather than a
/// panic.
pub fn print_out(args: Arguments<'_>) {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            print_err(format_args!("error: cannot write to stdout: {e}\n"));
        }
    }
}

/// Writes to stderr, ignoring failure: there is nowhere left to report it.
pub fn print_err(args: Arguments<'_>) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// Whether stdout has gone: a write already failed on it, or it is a pipe or socket whose
/// reader closed it (poll reports an error or hang-up on it without writing anything).
pub fn stdout_closed() -> bool {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return true;
    }
    use rustix::event::{poll, PollFd, PollFlags};
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(&stdout, PollFlags::OUT)];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match poll(&mut fds, Some(&zero)) {
        Ok(_) => fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP),
        Err(_) => false,
    }
}

/// Whether `error` comes from a closed stdout: its root cause is a broken pipe and stdout has
/// no reader (a broken pipe to a plugin's stdin is a real error and is reported).
pub fn is_closed_stdout(error: &anyhow::Error) -> bool {
    let broken = error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    });
    broken && stdout_closed()
}
