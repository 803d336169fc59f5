//! The `uvfs` binary's global allocator: mimalloc, through its plain calls wherever the
//! alignment asked for is one mimalloc gives every block anyway.
//!
//! Why not the `mimalloc` crate's `MiMalloc`: it passes every allocation to
//! `mi_malloc_aligned`, whose slow path (a size class with no free block at hand) takes
//! the over-allocation route for any size that is not a power of two: size + alignment - 1
//! bytes from the next size class. The block then comes from that class, so the exact one
//! never gets a page, and every later allocation of that size goes the same way. A
//! directory's 40-byte map node took a 48-byte block and an open file's 80 bytes a 96-byte
//! one, and a create + close cost 200 instructions more (`churn`, BENCHMARKS.md). The plain
//! calls (`mi_malloc`, `mi_zalloc`, `mi_realloc`) return blocks aligned to their size up
//! to 16 bytes (`MI_MAX_ALIGN_SIZE`), which is what the older `mimalloc` crate relied on,
//! and an open change of the crate proposes again (purpleprotocol/mimalloc_rust#170).

#![no_std]

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment every mimalloc block of at least that size has (`MI_MAX_ALIGN_SIZE` on
/// the 64-bit targets uvfs builds for).
const MIN_ALIGN: usize = 16;

/// mimalloc as the global allocator (see the crate docs).
pub struct Mimalloc;

/// Whether a block of `size` bytes from the plain calls is aligned enough for `align`.
#[inline]
fn plain(align: usize, size: usize) -> bool {
    align <= MIN_ALIGN && align <= size
}

// SAFETY: every method returns a block of at least the layout's size and alignment from
// mimalloc (the plain calls only where `plain` says their blocks are aligned enough), or
// null, and `dealloc`/`realloc` get only blocks mimalloc handed out (`mi_free` and
// `mi_realloc` take blocks of either kind).
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: FFI calls with a size and a power-of-two alignment.
        unsafe {
            if plain(l.align(), l.size()) {
                mi::mi_malloc(l.size()).cast()
            } else {
                mi::mi_malloc_aligned(l.size(), l.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe {
            if plain(l.align(), l.size()) {
                mi::mi_zalloc(l.size()).cast()
            } else {
                mi::mi_zalloc_aligned(l.size(), l.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, _l: Layout) {
        // SAFETY: `p` came from this allocator (the caller's contract).
        unsafe { mi::mi_free(p.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `p` came from this allocator; the new block keeps the alignment.
        unsafe {
            if plain(l.align(), new_size) {
                mi::mi_realloc(p.cast(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(p.cast(), new_size, l.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks of every size and alignment up to 4 KiB are aligned, hold their bytes across
    /// a realloc, and zeroed ones are zero.
    #[test]
    fn blocks_are_aligned_and_keep_their_bytes() {
        let a = Mimalloc;
        for size in [1usize, 7, 8, 15, 16, 24, 40, 80, 100, 4096, 5000] {
            for align in [1usize, 8, 16, 32, 64, 4096] {
                let l = Layout::from_size_align(size, align).unwrap();
                // SAFETY: a non-zero size; each block is freed once, with its layout.
                unsafe {
                    let p = a.alloc(l);
                    assert!(!p.is_null() && (p as usize).is_multiple_of(align), "{size} bytes at {align}");
                    p.write_bytes(0xa5, size);
                    let q = a.realloc(p, l, size * 3);
                    assert!(!q.is_null() && (q as usize).is_multiple_of(align), "realloc of {size} at {align}");
                    assert!((0..size).all(|i| *q.add(i) == 0xa5));
                    a.dealloc(q, Layout::from_size_align(size * 3, align).unwrap());
                    let z = a.alloc_zeroed(l);
                    assert!(!z.is_null() && (z as usize).is_multiple_of(align));
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    a.dealloc(z, l);
                }
            }
        }
    }

    /// The point of the crate: a size that is not a power of two gets a block of its own
    /// size class (`mi_good_size`), not the next one's: through `mi_malloc_aligned`
    /// an 80-byte block was a 96-byte one.
    #[test]
    fn odd_sizes_get_their_own_size_class() {
        let a = Mimalloc;
        for size in [24usize, 40, 80, 100, 200, 1000] {
            let l = Layout::from_size_align(size, 8).unwrap();
            // SAFETY: as above.
            unsafe {
                let ps: [*mut u8; 64] = core::array::from_fn(|_| a.alloc(l));
                for &p in &ps {
                    assert_eq!(mi::mi_usable_size(p.cast()), mi::mi_good_size(size), "a {size}-byte block");
                }
                for p in ps {
                    a.dealloc(p, l);
                }
            }
        }
    }

    /// What `uvfs`'s layouts rely on: an allocation of the 128-, 192- or 256-byte class
    /// asked with 8-byte alignment starts on a cache line, and one of the 96- or 160-byte
    /// class (an `Arc<Dentry>`, an `Arc<Inode>`: `core/dentry.rs`, `core/inode.rs`) on a
    /// line or half-way into one, so the `Arc`'s counts and the fields a lookup reads fall
    /// where their checks say. mimalloc starts a page of such blocks on a line and packs
    /// them, so a block whose size is a multiple of 64 starts on a line, one of 96 or 160
    /// bytes on a line or half-way into one. If an update changes that, only speed
    /// changes, and this says so.
    #[test]
    fn blocks_of_the_cache_line_multiple_classes_start_on_a_line() {
        let a = Mimalloc;
        for (size, line) in [(128usize, 64), (184, 64), (192, 64), (256, 64), (96, 32), (160, 32)] {
            let l = Layout::from_size_align(size, 8).unwrap();
            // SAFETY: as above; some freed early so that later ones reuse their blocks.
            unsafe {
                let mut ps: [*mut u8; 1000] = core::array::from_fn(|_| a.alloc(l));
                for p in ps.iter_mut().step_by(3) {
                    a.dealloc(*p, l);
                    *p = a.alloc(l);
                }
                assert!(
                    ps.iter().all(|&p| (p as usize).is_multiple_of(line)),
                    "{size}-byte blocks off a {line}-byte boundary"
                );
                for p in ps {
                    a.dealloc(p, l);
                }
            }
        }
    }

    /// The same through the aligned call the `mimalloc` crate makes, on a new thread (whose
    /// heap has no page of 80-byte blocks yet, as a program's has not at first): it is what
    /// this crate is for, so if a mimalloc update fixes it, this fails and the crate can go.
    #[test]
    fn the_aligned_call_takes_the_next_size_class() {
        extern crate std;
        let usable = std::thread::spawn(|| {
            // SAFETY: blocks allocated and freed once each.
            unsafe {
                let ps: [*mut c_void; 8] = core::array::from_fn(|_| mi::mi_malloc_aligned(80, 8));
                let usable = ps.map(|p| mi::mi_usable_size(p));
                for p in ps {
                    mi::mi_free(p);
                }
                usable
            }
        })
        .join()
        .unwrap();
        // SAFETY: a pure function of its argument.
        let good = unsafe { mi::mi_good_size(80) };
        assert!(usable.iter().all(|&u| u > good), "80 bytes through mi_malloc_aligned: {usable:?}");
    }
}
