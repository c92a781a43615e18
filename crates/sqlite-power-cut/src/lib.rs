//! A simulated power cut for SQLite files: a VFS shim that remembers, for every file under a
//! tracked directory, what the OS was told to make durable (`xSync`) and what it was not, so a
//! test can "cut the power" at a chosen I/O operation and get the files as a disk would hold
//! them afterwards.
//!
//! Why a VFS shim: a process crash (SIGKILL) keeps every write the process made, since the
//! page cache survives it; only an OS crash or a power cut loses the writes not yet synced,
//! and that is what `synchronous = NORMAL` versus `FULL` is about. A loop device or a
//! file-system snapshot cannot drop "the unsynced writes" on demand without a kernel fault
//! injector; SQLite's own crash tests (`test6.c`, `crashsql`) do it at the VFS, which sees
//! every write and every sync. This does the same from Rust, through `rusqlite::ffi`.
//!
//! The model (what a disk may hold after a power cut):
//! - everything a file held at its last successful `xSync` is there (a synced file also
//!   exists: SQLite syncs the directory of a new log or journal with its first sync; for a
//!   new database file ext4 and xfs commit the entry with the file's fsync);
//! - of what was written, truncated or deleted since, [`Loss::All`] keeps nothing, and
//!   [`Loss::Random`] keeps, per file, either the changes up to a random point in the order
//!   they were made (the next one torn to a prefix of its sectors: in-order writeback), or a
//!   random subset of them (each kept with a probability drawn between 1/2 and 1), applied
//!   in order, each kept write torn to a random subset of its 512-byte sectors (the page
//!   cache may write back in any order, and a sector is what a disk writes atomically);
//! - the `-shm` file (the log's shared-memory index) is not kept: it is written through
//!   `mmap`, never synced, and SQLite rebuilds it from the log when the first connection
//!   opens (the unix VFS truncates it then), so dropping it is what a restart does.
//!
//! How it is used: [`PowerCut::track`] installs the shim as the process's default VFS (once;
//! files outside every tracked directory pass straight through, so the same process reopens
//! the cut files normally) and tracks a directory; [`PowerCut::arm`] chooses the operation
//! (writes, truncates, syncs and deletes under the directory, numbered from 1) before which
//! the power goes; the workload runs and reports each acknowledged unit with
//! [`PowerCut::note_ack`]; [`PowerCut::write_after_cut`] writes the files as the cut left
//! them into another directory, with the number of units acknowledged before the cut. The
//! live files go on being written after the cut (the process does not stop); the test
//! discards them.
//!
//! This is its own crate because the workspace forbids `unsafe` everywhere else; it is a
//! dev-dependency only. Panicking is how a test fails, so it may `expect` freely.
//!
//! Every I/O call on a tracked file runs under one lock, so the recorded order is the order
//! the OS saw, across the store's threads. Reads go to the real files (which hold every
//! write), and so does SQLite's memory map (`xFetch`), which only ever reads.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use rusqlite::ffi;

/// What a power cut loses of the writes the OS was not told to sync.
#[derive(Clone, Copy, Debug)]
pub enum Loss {
    /// All of them.
    All,
    /// Some of them (seeded): per file, the changes up to a random point with the next one
    /// torn, or a random subset with each kept write torn (see the module header).
    Random {
        /// The seed.
        seed: u64,
    },
}

/// One change to a file, not yet synced.
#[derive(Clone, Debug)]
enum Op {
    Write { offset: u64, data: Vec<u8> },
    Truncate(u64),
    Delete,
}

/// What is known of one file: its content at the last sync (`None`: it does not exist on
/// the disk), and the changes since.
#[derive(Clone, Debug, Default)]
struct FileLog {
    durable: Option<Vec<u8>>,
    pending: Vec<Op>,
}

fn apply(image: &mut Option<Vec<u8>>, op: &Op) {
    match op {
        Op::Write { offset, data } => {
            let img = image.get_or_insert_with(Vec::new);
            let end = *offset as usize + data.len();
            if img.len() < end {
                img.resize(end, 0);
            }
            img[*offset as usize..end].copy_from_slice(data);
        }
        Op::Truncate(len) => {
            if let Some(img) = image {
                img.resize(*len as usize, 0);
            }
        }
        Op::Delete => *image = None,
    }
}

/// Deterministic pseudo-random numbers (the cut must be reproducible from its seed).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// True with probability `permille`/1000.
    fn chance(&mut self, permille: u64) -> bool {
        self.next() % 1000 < permille
    }
}

/// The bytes a disk writes atomically.
const SECTOR: usize = 512;

impl FileLog {
    /// The file after a power cut that loses `loss` of the pending changes.
    fn after_cut(&self, loss: Loss, rng: &mut Rng) -> Option<Vec<u8>> {
        let mut image = self.durable.clone();
        if let Loss::Random { .. } = loss {
            if rng.chance(500) {
                // Written back in order up to a point: the first `n` changes reached the
                // disk, the next one torn (a prefix of its sectors), nothing after it. This
                // is how the last commits of a log survive in part.
                let n = (rng.next() % (self.pending.len() as u64 + 1)) as usize;
                for op in &self.pending[..n] {
                    apply(&mut image, op);
                }
                if let Some(Op::Write { offset, data }) = self.pending.get(n) {
                    let sectors = data.len().div_ceil(SECTOR) as u64;
                    let keep = (rng.next() % (sectors + 1)) as usize * SECTOR;
                    let keep = keep.min(data.len());
                    if keep > 0 {
                        let data = data[..keep].to_vec();
                        apply(
                            &mut image,
                            &Op::Write {
                                offset: *offset,
                                data,
                            },
                        );
                    }
                }
            } else {
                // Written back in any order: each change kept with a probability drawn for
                // this file (from half to nearly all), each kept write torn sector by sector.
                let keep = 500 + rng.next() % 500;
                for op in &self.pending {
                    if !rng.chance(keep) {
                        continue;
                    }
                    match op {
                        Op::Write { offset, data } => {
                            let mut at = 0usize;
                            while at < data.len() {
                                let abs = *offset as usize + at;
                                let len = (SECTOR - abs % SECTOR).min(data.len() - at);
                                if rng.chance(keep) {
                                    apply(
                                        &mut image,
                                        &Op::Write {
                                            offset: abs as u64,
                                            data: data[at..at + len].to_vec(),
                                        },
                                    );
                                }
                                at += len;
                            }
                        }
                        other => apply(&mut image, other),
                    }
                }
            }
        }
        image
    }
}

#[derive(Default)]
struct State {
    files: BTreeMap<PathBuf, FileLog>,
    /// Operations counted so far.
    ops: u64,
    /// The operation before which the power goes (`0`: never).
    cut_before: u64,
    /// The files at the cut, and the acknowledgements counted before it.
    cut: Option<(BTreeMap<PathBuf, FileLog>, u64)>,
    acked: u64,
    /// One line per counted operation (for a failing test to show what led to its cut).
    trace: Vec<String>,
}

impl State {
    /// Counts one operation; takes the cut when it is the chosen one. Returns whether the
    /// operation is to be recorded (nothing is, after the cut).
    fn count(&mut self) -> bool {
        if self.cut.is_some() {
            return false;
        }
        self.ops += 1;
        if self.ops == self.cut_before {
            self.cut = Some((self.files.clone(), self.acked));
            return false;
        }
        true
    }

    /// Adds operation `what` on `path` to the trace (before the cut only).
    fn note(&mut self, path: &Path, what: std::fmt::Arguments<'_>) {
        if self.cut.is_none() {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default();
            let line = format!("{} {name} {what}", self.ops);
            self.trace.push(line);
        }
    }
}

/// A tracked directory: the files under it and the power cut armed for them.
pub struct Tracker {
    dir: PathBuf,
    state: Mutex<State>,
}

impl Tracker {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Tracked directories, looked up by every `xOpen` and `xDelete`.
fn registry() -> &'static Mutex<Vec<Weak<Tracker>>> {
    static R: OnceLock<Mutex<Vec<Weak<Tracker>>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

fn tracker_for(path: &Path) -> Option<Arc<Tracker>> {
    let mut r = registry().lock().unwrap_or_else(|p| p.into_inner());
    r.retain(|w| w.strong_count() > 0);
    r.iter()
        .filter_map(Weak::upgrade)
        .find(|t| path.starts_with(&t.dir))
}

/// A directory whose files lose their unsynced writes when [`PowerCut::arm`]ed.
pub struct PowerCut {
    tracker: Arc<Tracker>,
}

impl PowerCut {
    /// Installs the shim as the default VFS (once per process) and tracks the files under
    /// `dir` (an existing directory; files already there start as durable as they are).
    pub fn track(dir: &Path) -> PowerCut {
        install();
        let dir = dir
            .canonicalize()
            .unwrap_or_else(|e| panic!("tracking {}: {e}", dir.display()));
        let tracker = Arc::new(Tracker {
            dir,
            state: Mutex::new(State::default()),
        });
        registry()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::downgrade(&tracker));
        PowerCut { tracker }
    }

    /// Cuts the power just before operation `op` (counted from 1 since tracking began).
    pub fn arm(&self, op: u64) {
        self.tracker.lock().cut_before = op;
    }

    /// Operations (writes, truncates, syncs, deletes) counted so far.
    pub fn ops(&self) -> u64 {
        self.tracker.lock().ops
    }

    /// Whether the power is off.
    pub fn is_cut(&self) -> bool {
        self.tracker.lock().cut.is_some()
    }

    /// Records that `n` units of work were acknowledged (if the power is still on).
    pub fn note_ack(&self, n: u64) {
        let mut s = self.tracker.lock();
        if s.cut.is_none() {
            s.acked = n;
        }
    }

    /// One line per counted operation, in order: number, file, what (for diagnosis).
    pub fn trace(&self) -> Vec<String> {
        self.tracker.lock().trace.clone()
    }

    /// Cuts the power now (if it is still on).
    pub fn cut_now(&self) {
        let mut s = self.tracker.lock();
        if s.cut.is_none() {
            s.cut = Some((s.files.clone(), s.acked));
        }
    }

    /// Writes the tracked files as the cut left them into `into` (same relative names; a
    /// `-shm` file is never written, see the module header) and returns the units
    /// acknowledged before the cut.
    ///
    /// # Panics
    ///
    /// When the power was not cut.
    pub fn write_after_cut(&self, into: &Path, loss: Loss) -> u64 {
        let s = self.tracker.lock();
        let (files, acked) = s.cut.as_ref().expect("the power was not cut");
        let mut rng = Rng(match loss {
            Loss::All => 0,
            Loss::Random { seed } => seed,
        });
        for (path, log) in files {
            let name = path.to_string_lossy();
            if name.ends_with("-shm") {
                continue;
            }
            let Some(image) = log.after_cut(loss, &mut rng) else {
                continue;
            };
            let rel = path
                .strip_prefix(&self.tracker.dir)
                .expect("tracked files are under the tracked directory");
            let out = into.join(rel);
            if let Some(parent) = out.parent() {
                std::fs::create_dir_all(parent).unwrap();
            }
            std::fs::write(&out, image)
                .unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
        }
        *acked
    }
}

impl Drop for PowerCut {
    fn drop(&mut self) {
        let mut r = registry().lock().unwrap_or_else(|p| p.into_inner());
        r.retain(|w| w.upgrade().is_some_and(|t| !Arc::ptr_eq(&t, &self.tracker)));
    }
}

// ---- The VFS shim (unsafe: SQLite's C interface) ----
//
// SQLite allocates `szOsFile` bytes for each open file and hands the shim a pointer to them;
// the shim keeps its own `ShimFile` there, whose first field is the `sqlite3_file` header
// SQLite reads `pMethods` from, and allocates the real VFS's file (`real`) separately. Every
// method forwards to the real file; writes, truncates, syncs and deletes of tracked files are
// also recorded. The real VFS is the default one when the shim is installed (the unix VFS).

/// The shim's per-file state, in the memory SQLite allocated (`szOsFile` bytes).
#[repr(C)]
struct ShimFile {
    /// Must be first: SQLite reads `pMethods` through a `*mut sqlite3_file` to this.
    base: ffi::sqlite3_file,
    /// The real VFS's file, `real_size` bytes owned by this struct (`Vec<u64>` for
    /// alignment).
    real: *mut ffi::sqlite3_file,
    real_words: usize,
    /// The tracker and the file's path when it is under a tracked directory.
    tracked: Option<(Arc<Tracker>, PathBuf)>,
}

/// The real VFS (the default one before the shim was installed).
struct RealVfs(*mut ffi::sqlite3_vfs);
// SAFETY: a VFS object is immutable once registered and SQLite's VFS functions are called from
// any thread (the unix VFS is thread-safe).
unsafe impl Send for RealVfs {}
unsafe impl Sync for RealVfs {}

static REAL: OnceLock<RealVfs> = OnceLock::new();

fn real_vfs() -> *mut ffi::sqlite3_vfs {
    REAL.get().expect("the shim is installed").0
}

/// Registers the shim as the default VFS, once per process.
fn install() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        // SAFETY: `sqlite3_vfs_find(NULL)` returns the default VFS (initializing SQLite);
        // the shim's VFS object is leaked, so it outlives every connection, as SQLite needs.
        unsafe {
            let real = ffi::sqlite3_vfs_find(std::ptr::null());
            assert!(!real.is_null(), "SQLite has no default VFS");
            let _ = REAL.set(RealVfs(real));
            let mut vfs: ffi::sqlite3_vfs = std::ptr::read(real);
            vfs.szOsFile = std::mem::size_of::<ShimFile>() as c_int;
            vfs.pNext = std::ptr::null_mut();
            vfs.zName = c"clawctx-power-cut".as_ptr();
            vfs.pAppData = std::ptr::null_mut();
            vfs.xOpen = Some(shim_open);
            vfs.xDelete = Some(shim_delete);
            vfs.xAccess = Some(shim_access);
            vfs.xFullPathname = Some(shim_full_pathname);
            // The remaining functions (dlopen, randomness, sleep, time, system calls) ignore
            // the VFS pointer they are given in the unix VFS and are copied as they are.
            let vfs = Box::leak(Box::new(vfs));
            let rc = ffi::sqlite3_vfs_register(vfs, 1);
            assert_eq!(rc, ffi::SQLITE_OK, "registering the power-cut VFS");
        }
    });
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(shim_close),
    xRead: Some(shim_read),
    xWrite: Some(shim_write),
    xTruncate: Some(shim_truncate),
    xSync: Some(shim_sync),
    xFileSize: Some(shim_file_size),
    xLock: Some(shim_lock),
    xUnlock: Some(shim_unlock),
    xCheckReservedLock: Some(shim_check_reserved_lock),
    xFileControl: Some(shim_file_control),
    xSectorSize: Some(shim_sector_size),
    xDeviceCharacteristics: Some(shim_device_characteristics),
    xShmMap: Some(shim_shm_map),
    xShmLock: Some(shim_shm_lock),
    xShmBarrier: Some(shim_shm_barrier),
    xShmUnmap: Some(shim_shm_unmap),
    xFetch: Some(shim_fetch),
    xUnfetch: Some(shim_unfetch),
};

/// The shim file behind SQLite's pointer.
///
/// # Safety
///
/// `f` must be a file the shim opened (its `pMethods` is [`METHODS`]).
unsafe fn shim<'a>(f: *mut ffi::sqlite3_file) -> &'a mut ShimFile {
    &mut *(f as *mut ShimFile)
}

/// The real file and its methods.
///
/// # Safety
///
/// As [`shim`].
unsafe fn real(
    f: *mut ffi::sqlite3_file,
) -> (*mut ffi::sqlite3_file, &'static ffi::sqlite3_io_methods) {
    let r = shim(f).real;
    (r, &*(*r).pMethods)
}

fn path_of(z: *const c_char) -> Option<PathBuf> {
    if z.is_null() {
        return None;
    }
    // SAFETY: SQLite passes a NUL-terminated path.
    let s = unsafe { CStr::from_ptr(z) };
    Some(PathBuf::from(s.to_string_lossy().into_owned()))
}

unsafe extern "C" fn shim_open(
    _vfs: *mut ffi::sqlite3_vfs,
    z_name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let rv = real_vfs();
    let words = ((*rv).szOsFile as usize).div_ceil(8).max(1);
    let buf: &mut [u64] = Box::leak(vec![0u64; words].into_boxed_slice());
    let real = buf.as_mut_ptr() as *mut ffi::sqlite3_file;
    let path = path_of(z_name);
    let tracked = path
        .as_deref()
        .and_then(|p| tracker_for(p).map(|t| (t, p.to_path_buf())));
    // Opening may create the file: the tracker learns of it under its lock, before the real
    // open, so a file that did not exist starts as absent on the disk.
    let guard = tracked.as_ref().map(|(t, p)| {
        let mut s = t.lock();
        if !s.files.contains_key(p) {
            let durable = std::fs::read(p).ok();
            s.files.insert(
                p.clone(),
                FileLog {
                    durable,
                    pending: Vec::new(),
                },
            );
        }
        s
    });
    let rc = ((*rv).xOpen.expect("xOpen"))(rv, z_name, real, flags, out_flags);
    drop(guard);
    if rc != ffi::SQLITE_OK {
        // SQLite never calls xClose on a file whose open failed: free it here.
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            real as *mut u64,
            words,
        )));
        (*file).pMethods = std::ptr::null();
        return rc;
    }
    std::ptr::write(
        file as *mut ShimFile,
        ShimFile {
            base: ffi::sqlite3_file { pMethods: &METHODS },
            real,
            real_words: words,
            tracked,
        },
    );
    ffi::SQLITE_OK
}

unsafe extern "C" fn shim_delete(
    _vfs: *mut ffi::sqlite3_vfs,
    z_name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    let rv = real_vfs();
    let tracker = path_of(z_name).and_then(|p| tracker_for(&p).map(|t| (t, p)));
    let Some((t, p)) = tracker else {
        return ((*rv).xDelete.expect("xDelete"))(rv, z_name, sync_dir);
    };
    let mut s = t.lock();
    let record = s.count();
    s.note(&p, format_args!("delete sync_dir={sync_dir}"));
    let rc = ((*rv).xDelete.expect("xDelete"))(rv, z_name, sync_dir);
    if record && rc == ffi::SQLITE_OK {
        let log = s.files.entry(p).or_default();
        if sync_dir != 0 {
            // The directory was synced: the file is gone for good.
            log.durable = None;
            log.pending.clear();
        } else {
            log.pending.push(Op::Delete);
        }
    }
    rc
}

unsafe extern "C" fn shim_access(
    _vfs: *mut ffi::sqlite3_vfs,
    z_name: *const c_char,
    flags: c_int,
    out: *mut c_int,
) -> c_int {
    let rv = real_vfs();
    ((*rv).xAccess.expect("xAccess"))(rv, z_name, flags, out)
}

unsafe extern "C" fn shim_full_pathname(
    _vfs: *mut ffi::sqlite3_vfs,
    z_name: *const c_char,
    n_out: c_int,
    z_out: *mut c_char,
) -> c_int {
    let rv = real_vfs();
    ((*rv).xFullPathname.expect("xFullPathname"))(rv, z_name, n_out, z_out)
}

unsafe extern "C" fn shim_close(f: *mut ffi::sqlite3_file) -> c_int {
    let (r, m) = real(f);
    let rc = (m.xClose.expect("xClose"))(r);
    let s = shim(f);
    drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
        s.real as *mut u64,
        s.real_words,
    )));
    // Drops the tracker reference; the memory itself is SQLite's.
    std::ptr::drop_in_place(&mut s.tracked);
    (*f).pMethods = std::ptr::null();
    rc
}

unsafe extern "C" fn shim_read(
    f: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    let (r, m) = real(f);
    (m.xRead.expect("xRead"))(r, buf, amt, offset)
}

unsafe extern "C" fn shim_write(
    f: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    let (r, m) = real(f);
    let Some((t, p)) = &shim(f).tracked else {
        return (m.xWrite.expect("xWrite"))(r, buf, amt, offset);
    };
    let mut s = t.lock();
    let record = s.count();
    s.note(p, format_args!("write {amt} at {offset}"));
    let rc = (m.xWrite.expect("xWrite"))(r, buf, amt, offset);
    if record && rc == ffi::SQLITE_OK {
        let data = std::slice::from_raw_parts(buf as *const u8, amt as usize).to_vec();
        s.files
            .entry(p.clone())
            .or_default()
            .pending
            .push(Op::Write {
                offset: offset as u64,
                data,
            });
    }
    rc
}

unsafe extern "C" fn shim_truncate(f: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    let (r, m) = real(f);
    let Some((t, p)) = &shim(f).tracked else {
        return (m.xTruncate.expect("xTruncate"))(r, size);
    };
    let mut s = t.lock();
    let record = s.count();
    s.note(p, format_args!("truncate to {size}"));
    let rc = (m.xTruncate.expect("xTruncate"))(r, size);
    if record && rc == ffi::SQLITE_OK {
        s.files
            .entry(p.clone())
            .or_default()
            .pending
            .push(Op::Truncate(size as u64));
    }
    rc
}

unsafe extern "C" fn shim_sync(f: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    let (r, m) = real(f);
    let Some((t, p)) = &shim(f).tracked else {
        return (m.xSync.expect("xSync"))(r, flags);
    };
    let mut s = t.lock();
    let record = s.count();
    s.note(p, format_args!("sync flags={flags:#x}"));
    let rc = (m.xSync.expect("xSync"))(r, flags);
    if record && rc == ffi::SQLITE_OK {
        let log = s.files.entry(p.clone()).or_default();
        let mut image = log.durable.take();
        for op in log.pending.drain(..) {
            apply(&mut image, &op);
        }
        // A synced file exists (see the module header), even if nothing was written yet.
        log.durable = Some(image.unwrap_or_default());
    }
    rc
}

unsafe extern "C" fn shim_file_size(
    f: *mut ffi::sqlite3_file,
    out: *mut ffi::sqlite3_int64,
) -> c_int {
    let (r, m) = real(f);
    (m.xFileSize.expect("xFileSize"))(r, out)
}

unsafe extern "C" fn shim_lock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    let (r, m) = real(f);
    (m.xLock.expect("xLock"))(r, level)
}

unsafe extern "C" fn shim_unlock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    let (r, m) = real(f);
    (m.xUnlock.expect("xUnlock"))(r, level)
}

unsafe extern "C" fn shim_check_reserved_lock(f: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    let (r, m) = real(f);
    (m.xCheckReservedLock.expect("xCheckReservedLock"))(r, out)
}

unsafe extern "C" fn shim_file_control(
    f: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    let (r, m) = real(f);
    (m.xFileControl.expect("xFileControl"))(r, op, arg)
}

unsafe extern "C" fn shim_sector_size(f: *mut ffi::sqlite3_file) -> c_int {
    let (r, m) = real(f);
    (m.xSectorSize.expect("xSectorSize"))(r)
}

unsafe extern "C" fn shim_device_characteristics(f: *mut ffi::sqlite3_file) -> c_int {
    let (r, m) = real(f);
    (m.xDeviceCharacteristics.expect("xDeviceCharacteristics"))(r)
}

unsafe extern "C" fn shim_shm_map(
    f: *mut ffi::sqlite3_file,
    pg: c_int,
    pgsz: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    let (r, m) = real(f);
    match m.xShmMap {
        Some(x) => x(r, pg, pgsz, extend, out),
        None => ffi::SQLITE_IOERR,
    }
}

unsafe extern "C" fn shim_shm_lock(
    f: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    let (r, m) = real(f);
    match m.xShmLock {
        Some(x) => x(r, offset, n, flags),
        None => ffi::SQLITE_IOERR,
    }
}

unsafe extern "C" fn shim_shm_barrier(f: *mut ffi::sqlite3_file) {
    let (r, m) = real(f);
    if let Some(x) = m.xShmBarrier {
        x(r);
    }
}

unsafe extern "C" fn shim_shm_unmap(f: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    let (r, m) = real(f);
    match m.xShmUnmap {
        Some(x) => x(r, delete),
        None => ffi::SQLITE_OK,
    }
}

unsafe extern "C" fn shim_fetch(
    f: *mut ffi::sqlite3_file,
    offset: ffi::sqlite3_int64,
    amt: c_int,
    out: *mut *mut c_void,
) -> c_int {
    let (r, m) = real(f);
    match m.xFetch {
        Some(x) if m.iVersion >= 3 => x(r, offset, amt, out),
        _ => {
            *out = std::ptr::null_mut();
            ffi::SQLITE_OK
        }
    }
}

unsafe extern "C" fn shim_unfetch(
    f: *mut ffi::sqlite3_file,
    offset: ffi::sqlite3_int64,
    p: *mut c_void,
) -> c_int {
    let (r, m) = real(f);
    match m.xUnfetch {
        Some(x) if m.iVersion >= 3 => x(r, offset, p),
        _ => ffi::SQLITE_OK,
    }
}
