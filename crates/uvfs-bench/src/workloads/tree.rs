//! The source tree the workloads run on, generated deterministically from a seed.
//!
//! Shape of a real C/Go/Rust project: top-level directories such as `src`, `drivers`,
//! `cmd`, `crates`, `tools`, `docs`, each of one language; directories nested up to
//! [`MAX_DEPTH`] deep (files live at depth 2 or more); names like `sched_queue.c`,
//! `route_test.go`, `mod.rs`, `Makefile`; modes 0644, 0755 for scripts, a few 0600; about
//! one symlink per hundred files (relative, to a file of the tree) and one dangling one.
//! Sizes follow a source tree's long tail: most files a few KiB, some tens of KiB, a few
//! hundred KiB and one in two hundred of a MiB or more, scaled so that the total is
//! exactly [`TreeSpec::bytes`]. Contents are text lines of the directory's language
//! (identifiers from a vocabulary, comments, statements), with a `TODO` comment now and
//! then so `grep -r TODO` has something to find.
//!
//! Beside it, [`write_cbuild`] writes a C project for `make -j`: `units` small `.c`
//! files with their headers and a Makefile; the program it builds prints a checksum that
//! [`CBuild::expected_output`] predicts.
//!
//! The generator is a hand-written SplitMix64 ([`Rng`]), not a `rand` generator: the
//! tree must stay the same across crate versions, and `rand` does not promise that its
//! range sampling stays the same.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Deepest directory level (a top-level directory is level 1).
pub const MAX_DEPTH: usize = 6;
/// Files live at this depth or deeper.
const MIN_FILE_DEPTH: usize = 2;
/// The word `grep -r` looks for.
pub const NEEDLE: &str = "TODO";

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and fixed forever.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0), by multiply-shift (Lemire; the bias is below 2^-32
    /// for the small `n` used here).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `p` in thousandths.
    pub fn per_mille(&mut self, p: u64) -> bool {
        self.below(1000) < p
    }

    /// A random element.
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }

    /// Log-uniform in `lo..=hi` (both > 0): as many files of 1-2 KiB as of 2-4 KiB.
    fn log_range(&mut self, lo: u64, hi: u64) -> u64 {
        let (a, b) = ((lo as f64).ln(), (hi as f64).ln());
        let u = self.next_u64() as f64 / u64::MAX as f64;
        ((a + u * (b - a)).exp() as u64).clamp(lo, hi)
    }
}

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeSpec {
    /// Seed of everything.
    pub seed: u64,
    /// Regular files (symlinks come on top).
    pub files: usize,
    /// Total bytes of the regular files.
    pub bytes: u64,
    /// `.c` units of the C project.
    pub units: usize,
}

/// Mean file size of a source tree (the Linux kernel: about 1.3 GB in 80k files).
pub const MEAN_FILE_BYTES: u64 = 15_000;
/// The seed of every generated tree.
pub const SEED: u64 = 0x75_7666_732d_7774; // "uvfs-wt"

impl TreeSpec {
    /// Full mode: 10 000 files, 150 MB, 300 C units.
    pub fn full() -> TreeSpec {
        TreeSpec::with_files(10_000)
    }

    /// `--quick`: 2 000 files, 30 MB, 66 C units.
    pub fn quick() -> TreeSpec {
        TreeSpec::with_files(2_000)
    }

    /// `files` files of [`MEAN_FILE_BYTES`] on average, and a C project of one unit per 30
    /// files (4 to 300).
    pub fn with_files(files: usize) -> TreeSpec {
        let files = files.max(1);
        TreeSpec { seed: SEED, files, bytes: files as u64 * MEAN_FILE_BYTES, units: (files / 30).clamp(4, 300) }
    }
}

/// The language of a directory, which decides its file names and contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lang {
    C,
    Go,
    Rust,
    Misc,
}

const TOP: &[(&str, Lang)] = &[
    ("src", Lang::C),
    ("drivers", Lang::C),
    ("cmd", Lang::Go),
    ("crates", Lang::Rust),
    ("include", Lang::C),
    ("tools", Lang::Misc),
    ("fs", Lang::C),
    ("pkg", Lang::Go),
    ("net", Lang::C),
    ("docs", Lang::Misc),
    ("lib", Lang::C),
    ("internal", Lang::Go),
    ("tests", Lang::Misc),
    ("arch", Lang::C),
    ("scripts", Lang::Misc),
    ("crypto", Lang::C),
];

const WORDS: &[&str] = &[
    "buf", "cache", "inode", "dentry", "page", "sched", "mutex", "lock", "queue", "list", "hash", "node", "tree",
    "alloc", "free", "init", "exit", "read", "write", "open", "close", "sync", "flush", "map", "unmap", "table",
    "entry", "index", "key", "value", "count", "size", "len", "offset", "block", "sector", "dev", "irq", "timer",
    "clock", "task", "thread", "worker", "pool", "slab", "ring", "packet", "socket", "route", "proto", "codec",
    "parse", "token", "lexer", "config", "option", "state", "event", "signal", "pipe", "file", "path", "name", "mode",
    "flag", "mask", "bits", "word", "byte", "crc", "sum", "digest", "cipher", "rand", "seed", "stat", "attr", "xattr",
    "acl", "perm", "uid", "gid", "user", "group", "mount", "super", "journal", "log", "trace", "debug", "error",
    "retry", "backoff", "limit", "quota", "stream", "chunk", "frame", "header", "meta", "data", "core", "util",
];

const ERRNOS: &[&str] = &["EINVAL", "ENOMEM", "EIO", "EAGAIN", "EBUSY", "ENOENT", "EPERM", "ENOSPC"];

/// One directory: path relative to the tree, depth (top level: 1), language.
#[derive(Clone, Debug)]
struct Dir {
    path: String,
    depth: usize,
    lang: Lang,
    names: Vec<String>,
}

/// One regular file to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSpec {
    /// Path relative to the tree.
    pub path: String,
    /// Permission bits.
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// Language of its contents (index into the templates).
    lang: Lang,
    /// Seed of its contents.
    seed: u64,
}

/// The whole tree, before it is written.
#[derive(Clone, Debug)]
pub struct TreePlan {
    /// Directories, parents first.
    pub dirs: Vec<String>,
    /// Regular files.
    pub files: Vec<FileSpec>,
    /// Symlinks: (path, target).
    pub symlinks: Vec<(String, String)>,
}

fn unique(names: &mut Vec<String>, base: &str, ext: &str) -> String {
    let mut n = format!("{base}{ext}");
    let mut i = 2;
    while names.contains(&n) {
        n = format!("{base}_{i}{ext}");
        i += 1;
    }
    names.push(n.clone());
    n
}

fn cap(w: &str) -> String {
    let mut c = w.chars();
    c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
}

impl TreePlan {
    /// Lays out the tree of `spec` (no I/O).
    pub fn new(spec: &TreeSpec) -> TreePlan {
        let mut rng = Rng::new(spec.seed);
        let n_dirs = (spec.files / 12).max(4);
        let n_top = (n_dirs / 8).clamp(2, TOP.len());
        let mut dirs: Vec<Dir> = TOP[..n_top]
            .iter()
            .map(|(name, lang)| Dir { path: name.to_string(), depth: 1, lang: *lang, names: vec![] })
            .collect();
        while dirs.len() < n_dirs {
            // The deeper of two random candidates: trees are bushy below the top.
            let a = rng.below(dirs.len() as u64) as usize;
            let b = rng.below(dirs.len() as u64) as usize;
            let mut p = if dirs[a].depth >= dirs[b].depth { a } else { b };
            if dirs[p].depth >= MAX_DEPTH {
                p = a.min(b);
                if dirs[p].depth >= MAX_DEPTH {
                    continue;
                }
            }
            let word = *rng.pick(WORDS);
            let name = unique(&mut dirs[p].names, word, "");
            let d = Dir {
                path: format!("{}/{name}", dirs[p].path),
                depth: dirs[p].depth + 1,
                lang: dirs[p].lang,
                names: vec![],
            };
            dirs.push(d);
        }
        let homes: Vec<usize> = match (0..dirs.len()).filter(|&i| dirs[i].depth >= MIN_FILE_DEPTH).collect::<Vec<_>>() {
            v if v.is_empty() => (0..dirs.len()).collect(),
            v => v,
        };

        // Sizes: tiers of a source tree's long tail, then scaled to the exact total.
        let raw: Vec<u64> = (0..spec.files)
            .map(|_| match rng.below(1000) {
                0..=749 => rng.log_range(300, 8_000),
                750..=959 => rng.log_range(8_000, 48_000),
                960..=994 => rng.log_range(48_000, 300_000),
                _ => rng.log_range(600_000, 3_000_000),
            })
            .collect();
        let sizes = scale_to(&raw, spec.bytes);

        let mut files = Vec::with_capacity(spec.files);
        for (i, size) in sizes.into_iter().enumerate() {
            let d = *rng.pick(&homes);
            let lang = dirs[d].lang;
            let (w1, w2) = (*rng.pick(WORDS), *rng.pick(WORDS));
            let mut mode = 0o644;
            let name = match lang {
                Lang::C => match rng.below(10) {
                    0..=5 => unique(&mut dirs[d].names, &format!("{w1}_{w2}"), ".c"),
                    6..=8 => unique(&mut dirs[d].names, w1, ".h"),
                    _ if !dirs[d].names.iter().any(|n| n == "Makefile") => unique(&mut dirs[d].names, "Makefile", ""),
                    _ => unique(&mut dirs[d].names, "Kconfig", ""),
                },
                Lang::Go => match rng.below(10) {
                    0..=5 => unique(&mut dirs[d].names, w1, ".go"),
                    6..=8 => unique(&mut dirs[d].names, &format!("{w1}_test"), ".go"),
                    _ => unique(&mut dirs[d].names, "go", ".mod"),
                },
                Lang::Rust => match rng.below(10) {
                    0..=6 => unique(&mut dirs[d].names, &format!("{w1}_{w2}"), ".rs"),
                    7 => unique(&mut dirs[d].names, "mod", ".rs"),
                    8 => unique(&mut dirs[d].names, "lib", ".rs"),
                    _ => unique(&mut dirs[d].names, "Cargo", ".toml"),
                },
                Lang::Misc => match rng.below(10) {
                    0..=2 => {
                        mode = 0o755;
                        unique(&mut dirs[d].names, &format!("{w1}-{w2}"), ".sh")
                    }
                    3..=4 => {
                        mode = if rng.below(2) == 0 { 0o755 } else { 0o644 };
                        unique(&mut dirs[d].names, &format!("{w1}_{w2}"), ".py")
                    }
                    5..=6 => unique(&mut dirs[d].names, &cap(w1), ".md"),
                    7 => unique(&mut dirs[d].names, w1, ".json"),
                    _ => unique(&mut dirs[d].names, w1, ".txt"),
                },
            };
            if rng.per_mille(20) {
                mode = 0o600;
            }
            let seed = spec.seed ^ (i as u64 + 1).wrapping_mul(0xd134_2543_de82_ef95);
            files.push(FileSpec { path: format!("{}/{name}", dirs[d].path), mode, size, lang, seed });
        }

        // Symlinks: relative, to a file elsewhere in the tree; and one dangling.
        let mut symlinks = Vec::new();
        for _ in 0..(spec.files / 100).max(1) {
            let d = rng.below(dirs.len() as u64) as usize;
            let f = &files[rng.below(files.len() as u64) as usize];
            let up = "../".repeat(dirs[d].depth);
            let name = unique(&mut dirs[d].names, &format!("{}_link", rng.pick(WORDS)), "");
            symlinks.push((format!("{}/{name}", dirs[d].path), format!("{up}{}", f.path)));
        }
        if spec.files >= 50 {
            let name = unique(&mut dirs[0].names, "stale_link", "");
            symlinks.push((format!("{}/{name}", dirs[0].path), "does-not-exist.h".to_string()));
        }
        TreePlan { dirs: dirs.into_iter().map(|d| d.path).collect(), files, symlinks }
    }

    /// Total bytes of the regular files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Writes the tree under `root` (created; must not exist) and returns the number of
    /// lines that contain [`NEEDLE`] (what `grep -r` prints).
    pub fn write(&self, root: &Path) -> std::io::Result<u64> {
        let ctx = |p: &Path, e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", p.display()));
        std::fs::create_dir(root).map_err(|e| ctx(root, e))?;
        for d in &self.dirs {
            let p = root.join(d);
            std::fs::create_dir(&p).map_err(|e| ctx(&p, e))?;
        }
        let mut needles = 0;
        let mut buf = Vec::new();
        for f in &self.files {
            buf.clear();
            contents(f, &mut buf);
            needles += count_needle_lines(&buf);
            let p = root.join(&f.path);
            std::fs::write(&p, &buf).map_err(|e| ctx(&p, e))?;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(f.mode)).map_err(|e| ctx(&p, e))?;
        }
        for (path, target) in &self.symlinks {
            let p = root.join(path);
            std::os::unix::fs::symlink(target, &p).map_err(|e| ctx(&p, e))?;
        }
        for d in std::iter::once(root.to_path_buf()).chain(self.dirs.iter().map(|d| root.join(d))) {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).map_err(|e| ctx(&d, e))?;
        }
        Ok(needles)
    }
}

/// Lines of `buf` that contain [`NEEDLE`], as `grep` counts them.
pub fn count_needle_lines(buf: &[u8]) -> u64 {
    buf.split(|&b| b == b'\n').filter(|l| l.windows(NEEDLE.len()).any(|w| w == NEEDLE.as_bytes())).count() as u64
}

/// Scales `raw` so that the sum is exactly `total` (each at least 1 byte when `total`
/// allows; the rounding remainder goes to the largest).
fn scale_to(raw: &[u64], total: u64) -> Vec<u64> {
    let sum: u64 = raw.iter().sum::<u64>().max(1);
    let mut out: Vec<u64> = raw.iter().map(|&r| ((r as u128 * total as u128) / sum as u128).max(1) as u64).collect();
    let got: u64 = out.iter().sum();
    if let Some(big) = (0..out.len()).max_by_key(|&i| out[i]) {
        out[big] = (out[big] + total).saturating_sub(got).max(1);
    }
    out
}

/// The contents of `f`: text lines of its language, cut to exactly `f.size` bytes.
fn contents(f: &FileSpec, out: &mut Vec<u8>) {
    let mut rng = Rng::new(f.seed);
    let size = f.size as usize;
    out.reserve(size + 200);
    let mut line = String::with_capacity(160);
    while out.len() < size {
        line.clear();
        let w = |rng: &mut Rng| *rng.pick(WORDS);
        if rng.per_mille(15) {
            let c = match f.lang {
                Lang::C => "/*",
                Lang::Go | Lang::Rust => "//",
                Lang::Misc => "#",
            };
            line.push_str(&format!("{c} {NEEDLE}: {} the {} {}", w(&mut rng), w(&mut rng), w(&mut rng)));
            if f.lang == Lang::C {
                line.push_str(" */");
            }
        } else {
            match f.lang {
                Lang::C => c_line(&mut rng, &mut line),
                Lang::Go => go_line(&mut rng, &mut line),
                Lang::Rust => rust_line(&mut rng, &mut line),
                Lang::Misc => misc_line(&mut rng, &mut line),
            }
        }
        line.push('\n');
        out.extend_from_slice(line.as_bytes());
    }
    out.truncate(size);
}

fn c_line(rng: &mut Rng, l: &mut String) {
    let w = |rng: &mut Rng| *rng.pick(WORDS);
    let n = rng.below(4096);
    let s = match rng.below(9) {
        0 => format!("/* {} {} {}: {} the {} before {}. */", w(rng), w(rng), w(rng), w(rng), w(rng), w(rng)),
        1 => format!("static int {}_{}(struct {} *{}, unsigned long {})", w(rng), w(rng), w(rng), w(rng), w(rng)),
        2 => "{".to_string(),
        3 => "}".to_string(),
        4 => format!("\tif ({}->{} > {n})\n\t\treturn -{};", w(rng), w(rng), rng.pick(ERRNOS)),
        5 => format!("\t{}_{}({}, {n});", w(rng), w(rng), w(rng)),
        6 => format!("#include <{}/{}.h>", w(rng), w(rng)),
        7 => format!("#define {}_{} {n}", w(rng).to_ascii_uppercase(), w(rng).to_ascii_uppercase()),
        _ => format!("\t{}->{} = {}_{}({});", w(rng), w(rng), w(rng), w(rng), w(rng)),
    };
    l.push_str(&s);
}

fn go_line(rng: &mut Rng, l: &mut String) {
    let w = |rng: &mut Rng| *rng.pick(WORDS);
    let s = match rng.below(7) {
        0 => format!("// {} {} the {} of {}.", cap(w(rng)), w(rng), w(rng), w(rng)),
        1 => format!("func {}{}({} *{}) error {{", cap(w(rng)), cap(w(rng)), w(rng), cap(w(rng))),
        2 => format!("\tif err := {}.{}(); err != nil {{", w(rng), cap(w(rng))),
        3 => format!("\t\treturn fmt.Errorf(\"{} {}: %w\", err)", w(rng), w(rng)),
        4 => "\t}".to_string(),
        5 => format!("\t{} := {}.{}[{}]", w(rng), w(rng), cap(w(rng)), rng.below(64)),
        _ => "}".to_string(),
    };
    l.push_str(&s);
}

fn rust_line(rng: &mut Rng, l: &mut String) {
    let w = |rng: &mut Rng| *rng.pick(WORDS);
    let s = match rng.below(7) {
        0 => format!("/// {} the {} {} of a {}.", cap(w(rng)), w(rng), w(rng), w(rng)),
        1 => format!("pub fn {}_{}(&self, {}: u64) -> Result<{}, Errno> {{", w(rng), w(rng), w(rng), cap(w(rng))),
        2 => format!("    let {} = self.{}.{}({})?;", w(rng), w(rng), w(rng), rng.below(1024)),
        3 => format!("    if {} > {} {{ return Err(Errno::{}); }}", w(rng), rng.below(100), rng.pick(ERRNOS)),
        4 => format!("use crate::{}::{{{}, {}}};", w(rng), cap(w(rng)), cap(w(rng))),
        5 => format!("    Ok({}::new({}))", cap(w(rng)), w(rng)),
        _ => "}".to_string(),
    };
    l.push_str(&s);
}

fn misc_line(rng: &mut Rng, l: &mut String) {
    let w = |rng: &mut Rng| *rng.pick(WORDS);
    let s = match rng.below(5) {
        0 => format!("{} the {} {} and {} {}.", cap(w(rng)), w(rng), w(rng), w(rng), w(rng)),
        1 => format!("  \"{}_{}\": {},", w(rng), w(rng), rng.below(100_000)),
        2 => format!("{}_{}() {{ echo \"{} {}\"; }}", w(rng), w(rng), w(rng), w(rng)),
        3 => format!("def {}_{}({}, {}):", w(rng), w(rng), w(rng), w(rng)),
        _ => format!("## {} {}", cap(w(rng)), w(rng)),
    };
    l.push_str(&s);
}

/// The C project `make -j` builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CBuild {
    /// Number of `unit_NNN.c` files (plus `main.c`).
    pub units: usize,
    /// Seed of the constants.
    pub seed: u64,
}

impl CBuild {
    /// Per unit: (rounds, add, shift, mul) of its mixing function.
    fn constants(&self) -> Vec<(u64, u64, u64, u64)> {
        let mut rng = Rng::new(self.seed ^ 0xc0de);
        (0..self.units).map(|_| (rng.range(1, 4), rng.next_u64(), rng.range(7, 41), rng.next_u64() | 1)).collect()
    }

    /// What the built program prints: the checksum of the chain of units, computed the
    /// way the C code does (64-bit unsigned arithmetic wraps).
    pub fn expected_output(&self) -> String {
        let mut acc: u64 = self.seed;
        for (rounds, add, shift, mul) in self.constants() {
            for _ in 0..rounds {
                let x = acc.wrapping_add(add);
                acc = (x ^ (x >> shift)).wrapping_mul(mul);
            }
        }
        format!("{acc:016x}\n")
    }

    /// The name of the program the Makefile builds (in the project directory).
    pub const PROGRAM: &'static str = "prog";
}

/// Writes the C project into `dir` (created; must not exist).
pub fn write_cbuild(dir: &Path, cb: &CBuild) -> std::io::Result<()> {
    let consts = cb.constants();
    for sub in ["", "src", "include"] {
        std::fs::create_dir(dir.join(sub))?;
    }
    let mut mk = String::from("CC ?= cc\nCFLAGS ?= -O2\n\nOBJS = src/main.o");
    for i in 0..cb.units {
        mk.push_str(&format!(" \\\n\tsrc/unit_{i:03}.o"));
    }
    mk.push_str(&format!(
        "\n\n{p}: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n\nsrc/%.o: src/%.c include/common.h\n\t$(CC) $(CFLAGS) -Iinclude -c -o $@ $<\n\nclean:\n\trm -f {p} src/*.o\n",
        p = CBuild::PROGRAM
    ));
    std::fs::write(dir.join("Makefile"), mk)?;
    std::fs::write(
        dir.join("include/common.h"),
        "#ifndef COMMON_H\n#define COMMON_H\n#include <stdint.h>\n\n\
         static inline uint64_t mix(uint64_t x, uint64_t add, unsigned shift, uint64_t mul)\n{\n\
         \tx += add;\n\treturn (x ^ (x >> shift)) * mul;\n}\n#endif\n",
    )?;
    let mut main = String::from("#include <stdio.h>\n#include \"common.h\"\n");
    for (i, (rounds, add, shift, mul)) in consts.iter().enumerate() {
        std::fs::write(
            dir.join(format!("include/unit_{i:03}.h")),
            format!("#include <stdint.h>\nuint64_t unit_{i:03}(uint64_t x);\n"),
        )?;
        let mut f = std::fs::File::create(dir.join(format!("src/unit_{i:03}.c")))?;
        write!(
            f,
            "#include \"common.h\"\n#include \"unit_{i:03}.h\"\n\n\
             /* Unit {i}: {rounds} rounds of mix. */\n\
             uint64_t unit_{i:03}(uint64_t x)\n{{\n\
             \tfor (int r = 0; r < {rounds}; r++)\n\
             \t\tx = mix(x, {add}ULL, {shift}, {mul}ULL);\n\
             \treturn x;\n}}\n"
        )?;
        main.push_str(&format!("#include \"unit_{i:03}.h\"\n"));
    }
    main.push_str(&format!("\nint main(void)\n{{\n\tuint64_t acc = {}ULL;\n", cb.seed));
    for i in 0..cb.units {
        main.push_str(&format!("\tacc = unit_{i:03}(acc);\n"));
    }
    main.push_str("\tprintf(\"%016llx\\n\", (unsigned long long)acc);\n\treturn 0;\n}\n");
    std::fs::write(dir.join("src/main.c"), main)?;
    Ok(())
}

/// Where the staged tree lives: `<stage>/tree/src` (the generated tree or a copy of
/// `--tree`) and `<stage>/tree/cbuild`.
pub fn tree_paths(stage: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let top = stage.join("tree");
    (top.clone(), top.join("src"), top.join("cbuild"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_splitmix64() {
        // The published first outputs of SplitMix64 seeded with 0.
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        let mut r = Rng::new(7);
        for _ in 0..1000 {
            assert!(r.below(10) < 10);
            let x = r.range(3, 5);
            assert!((3..=5).contains(&x));
            let y = r.log_range(300, 8000);
            assert!((300..=8000).contains(&y));
        }
    }

    #[test]
    fn same_seed_same_plan() {
        let a = TreePlan::new(&TreeSpec::with_files(500));
        let b = TreePlan::new(&TreeSpec::with_files(500));
        assert_eq!(a.files, b.files);
        assert_eq!(a.dirs, b.dirs);
        assert_eq!(a.symlinks, b.symlinks);
        let c = TreePlan::new(&TreeSpec { seed: 1, ..TreeSpec::with_files(500) });
        assert_ne!(a.files, c.files);
    }

    #[test]
    fn full_tree_has_the_shape_of_a_source_tree() {
        let spec = TreeSpec::full();
        let p = TreePlan::new(&spec);
        assert_eq!(p.files.len(), 10_000);
        assert_eq!(p.bytes(), 150_000_000);
        let depth = |s: &str| s.matches('/').count() + 1;
        let max_dir = p.dirs.iter().map(|d| depth(d)).max().unwrap();
        assert!((3..=MAX_DEPTH).contains(&max_dir), "deepest directory: {max_dir}");
        assert!(p.files.iter().all(|f| depth(&f.path) > MIN_FILE_DEPTH && depth(&f.path) <= MAX_DEPTH + 1));
        // Mostly small files, a long tail, a few big ones.
        let small = p.files.iter().filter(|f| f.size <= 16 * 1024).count();
        let big = p.files.iter().filter(|f| f.size >= 512 * 1024).count();
        assert!(small > 6_000, "{small} small files");
        assert!((5..=200).contains(&big), "{big} big files");
        assert!(p.files.iter().all(|f| f.size >= 1));
        assert!(p.symlinks.len() >= 100);
        for ext in [".c", ".h", ".go", ".rs", ".md", ".sh"] {
            assert!(p.files.iter().any(|f| f.path.ends_with(ext)), "{ext}");
        }
        assert!(p.files.iter().any(|f| f.mode == 0o755) && p.files.iter().any(|f| f.mode == 0o600));
        // Names are unique.
        let mut all: Vec<&str> =
            p.files.iter().map(|f| f.path.as_str()).chain(p.dirs.iter().map(|d| d.as_str())).collect();
        all.extend(p.symlinks.iter().map(|(l, _)| l.as_str()));
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
    }

    #[test]
    fn contents_are_text_of_the_exact_size() {
        let p = TreePlan::new(&TreeSpec::with_files(200));
        let mut buf = Vec::new();
        let mut needles = 0;
        for f in &p.files {
            buf.clear();
            contents(f, &mut buf);
            assert_eq!(buf.len() as u64, f.size, "{}", f.path);
            assert!(buf.iter().all(|&b| b == b'\n' || b == b'\t' || (0x20..0x7f).contains(&b)), "{}", f.path);
            needles += count_needle_lines(&buf);
        }
        assert!(needles > 0);
    }

    #[test]
    fn scaling_hits_the_total() {
        assert_eq!(scale_to(&[1, 2, 3], 600), vec![100, 200, 300]);
        assert_eq!(scale_to(&[1, 1, 1], 10).iter().sum::<u64>(), 10);
        assert!(scale_to(&[1, 1000], 10).iter().all(|&s| s >= 1));
    }

    #[test]
    fn needle_lines_are_counted_like_grep() {
        assert_eq!(count_needle_lines(b"a TODO b\nno\nTODO TODO\nlast TODO"), 3);
        assert_eq!(count_needle_lines(b"TOD\nO"), 0);
    }

    #[test]
    fn c_project_output_is_predicted() {
        let a = CBuild { units: 3, seed: 5 }.expected_output();
        assert_eq!(a, CBuild { units: 3, seed: 5 }.expected_output());
        assert_ne!(a, CBuild { units: 4, seed: 5 }.expected_output());
        assert_eq!(a.len(), 17);
    }
}
