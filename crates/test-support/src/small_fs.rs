//! A tiny, real file system for out-of-space and read-only tests: a `tmpfs` mounted by the
//! test on a fresh directory, unmounted when the [`SmallFs`] is dropped.
//!
//! Why a real mount: what a store does when `write(2)` answers `ENOSPC`, or `open(2)` answers
//! `EROFS`, only shows against a file system that really says so; a mocked error would test
//! our mock. `tmpfs` needs no image file, no loop device and no `mkfs`, its size can be changed
//! in place (`remount,size=`), and it can be made read-only in place (`remount,ro`), which is
//! how "space returns" and "the state dir is read-only" are produced. `chmod` would not do for
//! read-only: the tests run as root (CI does), and root ignores permission bits.
//!
//! Mounting needs `CAP_SYS_ADMIN` (root, outside a restricted container). Without it a test
//! skips (prints why, [`SmallFs::mount`] returns `None`), except under `CI=true`, where it
//! fails: CI runs `.ci/run` as root and must run these tests, not skip them.
//!
//! A mount is never left behind: `Drop` unmounts (lazily, if something still holds a file open)
//! and removes the directory, also when the test panics.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A `tmpfs` of a chosen size, mounted on a fresh directory under the system temp dir.
#[derive(Debug)]
pub struct SmallFs {
    dir: PathBuf,
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Runs `mount`/`umount` with `args`; the error names the command and what it printed.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl SmallFs {
    /// Mounts a `tmpfs` of `bytes` (rounded up to pages by the kernel) on a fresh directory;
    /// `label` goes into the directory's name (which test made it). `None`, after printing why,
    /// when mounting is not permitted here.
    ///
    /// # Panics
    ///
    /// Under `CI=true` when the mount fails: CI must provide it (run as root).
    pub fn mount(label: &str, bytes: u64) -> Option<SmallFs> {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "clawctx-smallfs-{label}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return Self::unavailable(&format!("cannot create {}: {e}", dir.display()));
        }
        let opts = format!("size={bytes},mode=0755");
        let shown = dir.display().to_string();
        if let Err(e) = run(
            "mount",
            &["-t", "tmpfs", "-o", &opts, "clawctx-test", &shown],
        ) {
            let _ = std::fs::remove_dir(&dir);
            return Self::unavailable(&e);
        }
        Some(SmallFs { dir })
    }

    fn unavailable(why: &str) -> Option<SmallFs> {
        if in_ci() {
            panic!(
                "cannot mount a tmpfs for the out-of-space tests but CI=true: CI must run them \
                 (as root, with mount permitted): {why}"
            );
        }
        eprintln!("skipping: cannot mount a tmpfs (needs root): {why}");
        None
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Changes the size in place (files stay; a size below what is used fails).
    pub fn resize(&self, bytes: u64) {
        let opts = format!("remount,size={bytes}");
        run("mount", &["-o", &opts, &self.dir.display().to_string()])
            .unwrap_or_else(|e| panic!("resizing the test tmpfs: {e}"));
    }

    /// Makes the file system read-only (`true`) or writable again (`false`), in place.
    pub fn set_read_only(&self, read_only: bool) {
        let opts = if read_only {
            "remount,ro"
        } else {
            "remount,rw"
        };
        run("mount", &["-o", opts, &self.dir.display().to_string()])
            .unwrap_or_else(|e| panic!("remounting the test tmpfs {opts}: {e}"));
    }

    /// Fills the free space with `name` (a file in the mount) until `write` answers
    /// `ENOSPC`; returns the bytes written. Delete the file (or [`Self::resize`]) to give the
    /// space back.
    pub fn fill(&self, name: &str) -> u64 {
        use std::io::Write;
        let path = self.dir.join(name);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("creating the filler {}: {e}", path.display()));
        let block = vec![0x5au8; 4096];
        let mut written = 0u64;
        loop {
            match f.write(&block) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
        written
    }

    /// Free bytes as the file system reports them.
    pub fn free_bytes(&self) -> u64 {
        let out = Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("running df: {e}"));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("unreadable df output for {}", self.dir.display()))
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let shown = self.dir.display().to_string();
        // A file still open somewhere (a store thread that outlived its test) makes a plain
        // unmount fail with EBUSY; a lazy one detaches the mount now and frees it when the
        // last file closes.
        if run("umount", &[&shown]).is_err() {
            if let Err(e) = run("umount", &["-l", &shown]) {
                eprintln!("warning: cannot unmount the test tmpfs: {e}");
                return;
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
