//! `uvfs bench --case workloads` through the real binary, with mount targets: `uvfs
//! mount` run as a separate process (built-in targets and a `--target-cmd` peer), and
//! nothing left behind after a run, after a server that forks away, and after Ctrl-C.
//! Needs root, /dev/fuse and the workload programs (scripts/setup.sh). Times are never
//! asserted.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const UVFS: &str = env!("CARGO_BIN_EXE_uvfs");

fn require() {
    // SAFETY: no preconditions.
    assert!(unsafe { libc::geteuid() } == 0, "these tests mount through FUSE: run them as root");
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing (modprobe fuse)");
}

/// A fresh host directory for `--hostdir`, removed on drop.
struct HostDir(PathBuf);

impl HostDir {
    fn new(tag: &str) -> HostDir {
        let p = std::env::temp_dir().join(format!("uvfs-cli-workloads-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir(&p).unwrap();
        HostDir(p)
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn bench(host: &HostDir, extra: &[&str]) -> Command {
    let mut c = Command::new(UVFS);
    c.args(["bench", "--case", "workloads", "--quick", "--json", "--big-file-mib", "4"])
        .arg("--hostdir")
        .arg(&host.0)
        .arg("--chart")
        // The chart is rendered and written, into nothing: a test leaves no file behind.
        .arg("/dev/null")
        .args(extra);
    c
}

/// What a run of process `pid` may have left: mounts, scratch directories, processes.
fn leftovers(pid: u32, host: &HostDir) -> Vec<String> {
    let tag = format!("uvfs-workloads.{pid}.");
    let mut left: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&tag))
        .map(|l| format!("mount: {l}"))
        .collect();
    for base in [Path::new("/dev/shm"), &host.0] {
        for e in std::fs::read_dir(base).unwrap().flatten() {
            if e.file_name().to_string_lossy().starts_with(&tag) {
                left.push(format!("directory: {}", e.path().display()));
            }
        }
    }
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline"))
            && String::from_utf8_lossy(&cmd).contains(&tag)
        {
            left.push(format!("process {}: {}", e.file_name().to_string_lossy(), String::from_utf8_lossy(&cmd)));
        }
    }
    left
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout {:?} stderr {}", o.stdout, String::from_utf8_lossy(&o.stderr)))
}

#[test]
fn mount_targets_and_a_peer_pass_every_check() {
    require();
    let host = HostDir::new("mounts");
    let peer = format!("self={UVFS} mount {{mnt}}");
    let child = bench(
        &host,
        &[
            "--tree-files",
            "80",
            "--samples",
            "1",
            "--target",
            "uvfs-memfs,uvfs-hostfs,self",
            "--target-cmd",
            &peer,
            "--mount-opt=--attr-timeout=2",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let j = json(&o);
    assert_eq!(j["config"]["mount_opts"][0], "--attr-timeout=2");
    let targets: Vec<&str> = j["targets"].as_array().unwrap().iter().map(|t| t["target"].as_str().unwrap()).collect();
    assert_eq!(targets, ["uvfs-memfs", "uvfs-hostfs", "self"]);
    assert_eq!(j["targets"][0]["command"], format!("{UVFS} mount --fs memfs --stats --attr-timeout=2 {{mnt}}"));
    assert_eq!(j["targets"][1]["cold"], "remount + drop_caches");
    // The empty round trip is timed on the uvfs mounts, never on a peer.
    assert!(j["targets"][0]["round_trip_us"].as_f64().is_some_and(|us| us > 0.0), "{}", j["targets"]);
    assert!(j["targets"][1]["round_trip_us"].as_f64().is_some_and(|us| us > 0.0), "{}", j["targets"]);
    assert!(j["targets"][2]["round_trip_us"].is_null(), "{}", j["targets"]);
    for w in j["workloads"].as_array().unwrap() {
        assert_eq!(w["failed"].as_array().unwrap().len(), 0, "{w}");
        let results = w["results"].as_array().unwrap();
        assert_eq!(results.len(), 3, "{w}");
        for r in results {
            // The server's CPU is measured for every mount target.
            assert_eq!(r["server_cpu_seconds"].as_array().map(Vec::len), Some(1), "{r}");
            // Round trips are counted by the uvfs servers (SIGUSR1 to --stats), not a peer's.
            let counted = r["round_trips"].as_array().map(Vec::len);
            assert_eq!(counted, (r["target"] != "self").then_some(1), "{r}");
        }
        if w["workload"] == "untar" {
            // At least a CREATE per file, through either uvfs mount.
            for r in results.iter().filter(|r| r["target"] != "self") {
                assert!(r["round_trips"][0].as_u64().unwrap() >= 80, "{r}");
            }
        }
    }
    assert_eq!(leftovers(pid, &host), Vec::<String>::new());
}

#[test]
fn a_server_that_forks_away_is_refused_and_unmounted() {
    require();
    let host = HostDir::new("forks");
    let peer = format!("bg={UVFS} mount --daemon {{mnt}}");
    let child = bench(&host, &["--tree-files", "20", "--samples", "1", "--target", "bg", "--target-cmd", &peer])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let j = json(&o);
    let f = &j["workloads"][0]["failed"][0];
    assert_eq!(f["target"], "bg");
    assert!(f["error"].as_str().unwrap().contains("went to the background"), "{f}");
    assert_eq!(leftovers(pid, &host), Vec::<String>::new());
}

#[test]
fn ctrl_c_leaves_nothing_behind() {
    require();
    let host = HostDir::new("sigint");
    // Big enough that the run is still busy when the signal comes.
    let mut child = bench(&host, &["--tree-files", "3000", "--samples", "3", "--target", "uvfs-memfs,uvfs-hostfs"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let tag = format!("uvfs-workloads.{pid}.");
    let t = Instant::now();
    while !std::fs::read_to_string("/proc/self/mountinfo").unwrap().contains(&tag) {
        assert!(t.elapsed() < Duration::from_secs(120), "no mount appeared");
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("the run ended ({st}) before mounting: {err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // In the middle of the round: a workload command and the server are running.
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: signalling the child this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGINT) }, 0);
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "the run did not end after SIGINT");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert_eq!(leftovers(pid, &host), Vec::<String>::new());
}
