//! A command tool's supervisor (Linux): a small process between the server and the program, so
//! that nothing the program started outlives its run, also when the server itself is killed.
//!
//! The parent-death signal reaches only a direct child, and a process group can only be signalled
//! by someone alive: a server killed with SIGKILL used to leave its tools' children running, and on
//! a shared store another replica then ran the task again beside them. With a supervisor, the
//! server starts its own executable with [`ARG`], which
//!
//! - asks for a catchable parent-death signal (SIGUSR1) and becomes a *child subreaper*, so a
//!   descendant that double-forks or calls `setsid` is re-parented to it, not to init;
//! - starts the program in its own process group (the one the server signals), with the
//!   supervisor's stdin, stdout, stderr, environment and directory;
//! - when the program exits: kills what it left behind (its group and every re-parented orphan)
//!   and exits the way the program did (its code, or its signal raised again);
//! - when the server dies (the parent-death signal; a SIGUSR1 while the server lives, which any
//!   process of the group could send, is ignored): kills the program's group and every descendant
//!   it can find, and exits.
//!
//! While the server lives it kills a run's tree itself ([`kill_all`]: the group and every
//! descendant of the supervisor), synchronously, so a run dropped at shutdown leaves nothing.
//!
//! The embedding binary opts in: its `main` calls [`run_if_asked`] first and then [`enable`]; a
//! library user who does neither keeps the parent-death signal on the program alone.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// The first argument that makes the binary a supervisor: `<exe> ARG <server pid> -- <argv…>`.
pub const ARG: &str = "__mcp-tasks-supervise";

/// What the supervisor writes to stderr, then exits with [`CANNOT_START`], when the program does
/// not start; the server turns it into the same result as a failed spawn.
pub(crate) const CANNOT_START_PREFIX: &str = "mcp-tasks supervisor: cannot start: ";
/// The supervisor's exit code when the program did not start (a shell's "not found").
pub(crate) const CANNOT_START: i32 = 127;

static PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// Makes command tools run under a supervisor: `program` is the executable whose `main` calls
/// [`run_if_asked`] (on Linux, `/proc/self/exe` names the running binary even if its file was
/// replaced since). Without it, only the parent-death signal covers a killed server.
pub fn enable(program: PathBuf) {
    // Without it (no /proc in a sandbox, say) every command tool would fail to start: they run
    // unsupervised instead, covered by the parent-death signal alone.
    if cfg!(target_os = "linux") && program.exists() && Path::new("/proc/self/stat").exists() {
        let _ = PROGRAM.set(program);
    }
}

/// The supervisor to start command tools under, if [`enable`] was called.
pub(crate) fn program() -> Option<&'static Path> {
    PROGRAM.get().map(PathBuf::as_path)
}

/// If this process was started as a supervisor, supervises and exits (it does not return);
/// otherwise returns at once. Call it first in `main`, before any thread starts.
pub fn run_if_asked() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).map(|a| a.as_os_str()) != Some(std::ffi::OsStr::new(ARG)) {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let code = linux::supervise(&args[2..]);
        std::process::exit(code);
    }
    #[cfg(not(target_os = "linux"))]
    {
        eprintln!("{CANNOT_START_PREFIX}the supervisor runs on Linux only");
        std::process::exit(CANNOT_START);
    }
}

/// Kills the whole tree of a run under `supervisor` (see the module doc), from the server; a no-op
/// off Linux.
pub(crate) fn kill_all(supervisor: u32) {
    #[cfg(target_os = "linux")]
    linux::kill_all(nix::unistd::Pid::from_raw(supervisor as i32));
    #[cfg(not(target_os = "linux"))]
    let _ = supervisor;
}

/// How long a clean-up keeps looking for processes that are still starting up, at most.
const CLEAN_UP_FOR: Duration = Duration::from_secs(2);

#[cfg(target_os = "linux")]
mod linux {
    use super::{CANNOT_START, CANNOT_START_PREFIX, CLEAN_UP_FOR};
    use nix::sys::prctl;
    use nix::sys::signal::{kill, raise, SigSet, Signal};
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    use nix::unistd::{getpgrp, getpid, getppid, Pid};
    use std::ffi::OsString;
    use std::time::Instant;

    /// The signals the supervisor takes by `sigwait`, never by a handler.
    const WAITED: [Signal; 6] = [
        Signal::SIGCHLD,
        Signal::SIGUSR1,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ];

    pub(super) fn supervise(args: &[OsString]) -> i32 {
        let (Some(server), Some(sep)) = (
            args.first()
                .and_then(|a| a.to_str())
                .and_then(|s| s.parse::<i32>().ok()),
            args.get(1),
        ) else {
            eprintln!(
                "{CANNOT_START_PREFIX}usage: {} <server pid> -- <program> [args…]",
                super::ARG
            );
            return CANNOT_START;
        };
        let argv = &args[2..];
        if sep != "--" || argv.is_empty() {
            eprintln!("{CANNOT_START_PREFIX}no program after --");
            return CANNOT_START;
        }
        let mut waited = SigSet::empty();
        for s in WAITED {
            waited.add(s);
        }
        // Blocked before anything can arrive; the program starts with an empty mask (the standard
        // library resets it between fork and exec).
        if let Err(e) = waited.thread_set_mask() {
            eprintln!("{CANNOT_START_PREFIX}cannot block signals: {e}");
            return CANNOT_START;
        }
        let _ = prctl::set_child_subreaper(true);
        // Replaces the SIGKILL the server set, which would leave no time to clean up. If the server
        // died before this, that SIGKILL came first; if it died just after, no signal comes, so the
        // parent is checked once the new one is in place.
        let _ = prctl::set_pdeathsig(Signal::SIGUSR1);
        if getppid().as_raw() != server {
            return 1;
        }
        // The group the server signals and the clean-up kills is this process's own: led by it
        // (the server starts it so; anyone else starting it gets a group of its own too).
        if getpgrp() != getpid() {
            let _ = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0));
        }
        let child = match std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!("{CANNOT_START_PREFIX}{:?}: {e}", argv[0]);
                return CANNOT_START;
            }
        };
        let program = Pid::from_raw(child.id() as i32);
        // The child handle is not waited on: every exit is reaped below, the program's among them.
        std::mem::forget(child);
        loop {
            let Ok(signal) = waited.wait() else {
                continue;
            };
            match signal {
                Signal::SIGCHLD => {
                    if let Some(status) = reap(Some(program)) {
                        clean_up();
                        return exit_like(status);
                    }
                }
                // The parent-death signal; from anyone else while the server lives, nothing.
                Signal::SIGUSR1 if getppid().as_raw() == server => {}
                Signal::SIGUSR1 => {
                    // The server died: nothing of the run may go on.
                    let _ = kill(program, Signal::SIGKILL);
                    clean_up();
                    return exit_like(WaitStatus::Signaled(program, Signal::SIGKILL, false));
                }
                // A stop the server sends to the group reaches the program itself; the supervisor
                // stays until the program is gone.
                _ => {}
            }
        }
    }

    /// Reaps every exited child; returns the program's status if it was among them.
    fn reap(program: Option<Pid>) -> Option<WaitStatus> {
        let mut found = None;
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => return found,
                Ok(s) => {
                    if s.pid() == program {
                        found = Some(s);
                    }
                }
            }
        }
    }

    /// Kills every process of the supervisor's group (the program's) and every child it has
    /// (orphans re-parented to it), again until none is left or [`CLEAN_UP_FOR`] has passed.
    fn clean_up() {
        let me = getpid();
        let group = getpgrp();
        let started = Instant::now();
        loop {
            let left = descendants(me, group);
            if left.is_empty() || started.elapsed() > CLEAN_UP_FOR {
                return;
            }
            for pid in left {
                let _ = kill(pid, Signal::SIGKILL);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            reap(None);
        }
    }

    /// SIGKILL to every process of the tree under `supervisor` (a child of this process, not yet
    /// waited for, so its pid cannot have been reused): its group, and every descendant by parent,
    /// whatever group it moved to; the supervisor itself last.
    pub(crate) fn kill_all(supervisor: Pid) {
        let table = processes();
        let mut tree: Vec<Pid> = Vec::new();
        let mut frontier = vec![supervisor];
        while let Some(parent) = frontier.pop() {
            for (pid, ppid, _) in &table {
                if *ppid == parent && !tree.contains(pid) {
                    tree.push(*pid);
                    frontier.push(*pid);
                }
            }
        }
        for (pid, _, pgrp) in &table {
            if *pgrp == supervisor && *pid != supervisor && !tree.contains(pid) {
                tree.push(*pid);
            }
        }
        for pid in tree {
            let _ = kill(pid, Signal::SIGKILL);
        }
        let _ = kill(supervisor, Signal::SIGKILL);
        let _ = nix::sys::signal::killpg(supervisor, Signal::SIGKILL);
    }

    /// Every live process (zombies left out): its pid, parent and group.
    fn processes() -> Vec<(Pid, Pid, Pid)> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter_map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                // After the command name (which may hold spaces and parentheses): state, ppid, pgrp.
                let (_, rest) = stat.rsplit_once(')')?;
                let mut fields = rest.split_whitespace();
                let state = fields.next()?;
                let ppid = fields.next()?.parse::<i32>().ok()?;
                let pgrp = fields.next()?.parse::<i32>().ok()?;
                (state != "Z")
                    .then(|| (Pid::from_raw(pid), Pid::from_raw(ppid), Pid::from_raw(pgrp)))
            })
            .collect()
    }

    /// Live processes (zombies left out) in `group` or whose parent is `me`, but not `me`.
    fn descendants(me: Pid, group: Pid) -> Vec<Pid> {
        processes()
            .into_iter()
            .filter(|(pid, ppid, pgrp)| *pid != me && (*ppid == me || *pgrp == group))
            .map(|(pid, _, _)| pid)
            .collect()
    }

    /// Exits the way the program did: its code, or its signal raised again (unblocked first;
    /// a signal this process ignores, such as SIGPIPE, falls back to 128 + its number).
    fn exit_like(status: WaitStatus) -> i32 {
        match status {
            WaitStatus::Exited(_, code) => code,
            WaitStatus::Signaled(_, signal, _) => {
                // The program's crash is the program's: this process leaves no core of its own.
                let _ =
                    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
                let mut one = SigSet::empty();
                one.add(signal);
                let _ = one.thread_unblock();
                let _ = raise(signal);
                128 + signal as i32
            }
            _ => 1,
        }
    }
}
