//! A directory's children by name (Linux's dentry hash, `d_hash`, which uvfs keeps per
//! directory): an open-addressed table with lockless readers and one writer at a time
//! (the directory's lock), reclaimed through the instance's collector.
//!
//! **Two cache misses a lookup.** The slots sit in groups of eight, and ahead of them, right
//! after the array's head, one tag byte per slot (the SwissTable layout): a lookup reads its
//! group's eight tags in one word, and only a slot whose tag matches its hash's low seven
//! bits, where the whole hash and the name (inline up to 15 bytes, [`Name`]) are compared.
//! A hit reads the tag word and one 32-byte slot, and touches no dentry before its name
//! matched; a miss usually stops at the first group, which has a free slot. (The chained
//! table before it read the bucket, then 1.4 nodes on average, each its own allocation.)
//! An entry costs no allocation of its own either: the slot holds the name and the `Arc`.
//!
//! **Write-once slots.** A tag byte goes `EMPTY` -> full -> `DELETED`, never back, while its
//! array lives: a reader that loaded a full tag (SeqCst, which acquires) reads a slot the
//! writer wrote before publishing that tag (release) and never writes again. So no reader sees a torn
//! slot and none needs a sequence check on a hit. A removed entry's `Arc` and long name are
//! dropped through the collector, after the readers that may be comparing them have left.
//! Deleted slots are not reused; they count towards the load that starts a rebuild, which
//! drops them.
//!
//! **Rebuilds spread over changes.** The insert that would fill the array past 7/8 starts a new
//! one sized for twice the live entries (smaller than the old after many removals), and
//! every change then moves [`MOVE_PER_STEP`] old groups into it: a slot is copied, its new
//! tag published, then its old tag deleted. Meanwhile entries are added to the new array,
//! and readers that miss in the old one look in the new one. The change that moves the last
//! group publishes the new array and retires the old one. A reader overlapping a step can
//! miss an entry that is there (it was moved behind it); it never finds a wrong one. Hits
//! are therefore always right; a miss is certain only when no step overlapped it, which
//! [`DHash::get_sure`] checks with the table's resize sequence, as the walk needs. A
//! directory emptied by removals gives its array back. Outside a rebuild an insert probes
//! once: the miss that shows the name is new ends at the group whose empty slot it fills.
//!
//! Tables hash with a seed of their own ([`table_seed`]): names chosen to collide in one
//! directory say nothing about another or another run.

use std::alloc::Layout;
use std::hash::BuildHasher;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence};

use crate::core::dentry::Name;
use crate::sync::rcu::{Collector, Guard, LocalGuard, Rcu};
use crate::sync::rhashtable::{WriterCheck, count_probes, table_seed};

/// Slots per group: one tag word.
const GROUP: usize = 8;
/// Old groups a change moves into the new array while a rebuild is under way.
const MOVE_PER_STEP: usize = 8;
/// An outgrown array of at least this many slots (4 KiB) is freed as soon as its readers
/// have left ([`Rcu::flush`]), not once 63 more objects were retired: a directory grown to
/// a million entries would otherwise keep its last array, about as large again, for as
/// long as nothing else is removed.
const FLUSH_SLOTS: usize = 128;
/// Tag of a slot never written: zero, so a new array's tags are one zeroing pass. A probe
/// ends at a group that has one.
const EMPTY: u8 = 0;
// New arrays' tags are zeroed, and `zero_bytes` finds the empty slots.
const _: () = assert!(EMPTY == 0);
/// Tag of a slot whose entry was removed or moved (and of the slots a small array does
/// not use): probes go on past it, inserts never write it again.
const DELETED: u8 = 1;
/// Full tags have the high bit set, and the hash's low seven bits below it.
const FULL: u8 = 0x80;

const LOWS: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// 0x80 in every byte of `w` that is zero, and nothing elsewhere (exact, no borrow between
/// bytes). Also the walk's NUL test of a path, a word at a time.
#[inline(always)]
pub(crate) fn zero_bytes(w: u64) -> u64 {
    !(((w & !HIGHS).wrapping_add(!HIGHS)) | w) & HIGHS
}

/// The slot indices of group `g` whose bytes in `mask` have their 0x80 bit set (a mask
/// from [`zero_bytes`] or `word & HIGHS`), lowest first.
#[inline(always)]
fn slots_of(g: usize, mut mask: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let i = g * GROUP + (mask.trailing_zeros() / 8) as usize;
            mask &= mask - 1;
            i
        })
    })
}

/// One entry: the hash, the name and the value, written once. 32 bytes, 32-aligned, so a
/// slot never straddles two cache lines.
#[repr(C, align(32))]
struct Slot<T> {
    hash: u64,
    name: Name,
    value: Arc<T>,
}

const _: () = assert!(size_of::<Slot<u8>>() == 32 && align_of::<Slot<u8>>() == 32);

/// The head of one array. An array is one allocation, 32-aligned: this head, the tags
/// right after it (so a small directory's tags share the head's cache line) and, from the
/// next 32-byte boundary, the slots. A probe of a cold directory reads that first line and
/// one slot.
#[repr(C)]
struct Head {
    /// Immutable: tag words, one per group of [`GROUP`] slots.
    groups: usize,
    /// Immutable: the slots this array uses (fewer than its one group for the smallest).
    cap: usize,
    /// Immutable: where the slots start, in bytes from the head.
    slots: usize,
}

/// An array, by its address. Copied freely; what it points to lives until the table
/// frees it directly (its drop) or through the collector (retired). The tags are atomic
/// ([`GROUP`] per word, slot `g * 8 + i` in byte `i`, little end first), changed only by
/// the writer, byte by byte (`EMPTY` -> full -> `DELETED`). A slot is written by the writer
/// before its tag is published and never again while the array lives; read by anyone who
/// loaded the full tag; dropped with the array if still full.
struct Array<T> {
    /// The allocation's address (with its provenance: every part is reached from it).
    head: NonNull<Head>,
    _slots: PhantomData<Slot<T>>,
}

impl<T> Clone for Array<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Array<T> {}

/// Arrays of at least this many bytes (a directory of some 16,000 entries and more) are
/// mapped from the kernel, not taken from the allocator: a new mapping's pages read as zero,
/// so its tags need no writing (a 1M-entry directory's next array has 2 MB of them, which
/// the change that started a rebuild wrote at once, taking a page fault for each of their
/// 512 pages), and `munmap` gives an outgrown array back at once.
const MAPPED: usize = 1 << 20;

impl<T> Array<T> {
    /// Where the slots start, and the allocation's layout, for `groups` tag words.
    fn layout(groups: usize) -> (usize, Layout) {
        let slots = (size_of::<Head>() + groups * size_of::<AtomicU64>()).next_multiple_of(size_of::<Slot<T>>());
        let size = slots + groups * GROUP * size_of::<Slot<T>>();
        (slots, Layout::from_size_align(size, align_of::<Slot<T>>()).expect("a DHash array's layout"))
    }

    /// Whether an array of `layout` is mapped from the kernel rather than allocated.
    fn mapped(layout: Layout) -> bool {
        layout.size() >= MAPPED && !cfg!(miri)
    }

    /// An array of `cap` usable slots: a power of two up to 64, then a multiple of 8.
    fn new(cap: usize) -> Array<T> {
        let groups = cap.div_ceil(GROUP);
        let (slots, layout) = Self::layout(groups);
        let p = if Self::mapped(layout) {
            use rustix::mm::{MapFlags, ProtFlags, mmap_anonymous};
            let prot = ProtFlags::READ | ProtFlags::WRITE;
            // SAFETY: a new private anonymous mapping, placed by the kernel (no address
            // given), so it overlaps nothing of ours.
            unsafe { mmap_anonymous(std::ptr::null_mut(), layout.size(), prot, MapFlags::PRIVATE) }
                .map_or(std::ptr::null_mut(), |m| m.cast::<u8>())
        } else {
            // SAFETY: the layout has a non-zero size (a head and one group at least).
            let p = unsafe { std::alloc::alloc(layout) };
            if !p.is_null() {
                // SAFETY: the allocation holds `groups` tag words after the head, aligned
                // (the slots' alignment covers both): they start empty (zero). A mapping's
                // pages read as zero already.
                unsafe { std::ptr::write_bytes(p.add(size_of::<Head>()).cast::<AtomicU64>(), 0, groups) };
            }
            p
        };
        let Some(head) = NonNull::new(p.cast::<Head>()) else { std::alloc::handle_alloc_error(layout) };
        // SAFETY: the memory holds the head, aligned (a page, or the slots' alignment); the
        // slots stay uninitialized.
        unsafe { head.write(Head { groups, cap, slots }) };
        let a = Array { head, _slots: PhantomData };
        // The slots a small array does not use read as deleted: probes pass them, inserts
        // skip them.
        if cap < GROUP {
            let mut w = 0u64;
            for i in cap..GROUP {
                w |= (DELETED as u64) << (8 * i);
            }
            a.tag_word(0).store(w, Ordering::Relaxed);
        }
        a
    }

    /// The array at `p`, one of the table's.
    ///
    /// # Safety
    /// `p` came from [`Array::into_raw`] and the array is alive.
    unsafe fn from_raw(p: *mut Head) -> Array<T> {
        // SAFETY: per the contract, non-null.
        Array { head: unsafe { NonNull::new_unchecked(p) }, _slots: PhantomData }
    }

    fn into_raw(self) -> *mut Head {
        self.head.as_ptr()
    }

    fn head(&self) -> &Head {
        // SAFETY: the head is written at creation and immutable.
        unsafe { self.head.as_ref() }
    }

    fn cap(&self) -> usize {
        self.head().cap
    }

    fn groups(&self) -> usize {
        self.head().groups
    }

    /// Tag word `g` (`g < groups`).
    #[inline(always)]
    fn tag_word(&self, g: usize) -> &AtomicU64 {
        debug_assert!(g < self.groups());
        // SAFETY: the tag words follow the head, initialized at creation; `g` is in range.
        unsafe { &*self.head.as_ptr().cast::<u8>().add(size_of::<Head>()).cast::<AtomicU64>().add(g) }
    }

    /// Slot `i`'s place (`i < groups * GROUP`), for the writer to fill or empty.
    #[inline(always)]
    fn slot_ptr(&self, i: usize) -> *mut Slot<T> {
        debug_assert!(i < self.groups() * GROUP);
        // SAFETY: in the allocation, by its layout.
        unsafe { self.head.as_ptr().cast::<u8>().add(self.head().slots).cast::<Slot<T>>().add(i) }
    }

    /// How many slots may be full or deleted before a rebuild: at least one stays empty,
    /// which ends every probe.
    fn max_used(&self) -> usize {
        let cap = self.cap();
        if cap < GROUP { cap - 1 } else { cap / 8 * 7 }
    }

    /// The group a hash starts probing at (the hash's high bits, `fastrange`).
    #[inline(always)]
    fn start(&self, h: u64) -> usize {
        ((h as u128 * self.groups() as u128) >> 64) as usize
    }

    /// The group a probe goes on to.
    #[inline(always)]
    fn next_group(&self, g: usize) -> usize {
        if g + 1 == self.groups() { 0 } else { g + 1 }
    }

    /// The slot a probe found; the borrow is as long as the caller's hold on the array.
    ///
    /// # Safety
    /// The slot's tag was loaded full (with acquire or stronger) from this array, or the
    /// caller is the writer that filled it; the array outlives `'a`.
    #[inline(always)]
    unsafe fn slot<'a>(self, i: usize) -> &'a Slot<T> {
        // SAFETY: per the contract, the slot was written before its tag was published and
        // is not written again while the array lives.
        unsafe { &*self.slot_ptr(i) }
    }

    /// The index of `name`'s full slot, probing from its hash's group.
    #[inline(always)]
    fn find(self, h: u64, name: &[u8]) -> Option<usize> {
        // SeqCst, as the collector's own protected loads (`Guard::protect`): under its
        // portable barrier (and so under Miri) a reader's load must join the total order
        // of the fence a reclaimer issues before freeing what was unlinked; on x86 and ARM
        // it is the same instruction as an acquire load.
        self.probe::<false, false>(h, name).ok()
    }

    /// One probe for `name` from its hash's group: `Ok` with its full slot, or a miss:
    /// `Err`, with (`FREE`) the first empty slot of the group where it stopped, where
    /// `put` would write the name (`None` if no group had one, or not asked: a plain
    /// lookup's miss, a failed open's, computes none). The writer (`WRITER`) loads the
    /// tags it wrote relaxed.
    #[inline(always)]
    fn probe<const WRITER: bool, const FREE: bool>(self, h: u64, name: &[u8]) -> Result<usize, Option<usize>> {
        #[cfg(debug_assertions)]
        crate::sync::counters::bump(|c| c.dir_lookups += 1);
        let order = if WRITER { Ordering::Relaxed } else { Ordering::SeqCst };
        let tag = (FULL | (h as u8 & 0x7f)) as u64 * LOWS;
        let groups = self.groups();
        let mut g = self.start(h);
        let mut probes = 0u64;
        for _ in 0..groups {
            let w = self.tag_word(g).load(order);
            for i in slots_of(g, zero_bytes(w ^ tag)) {
                probes += 1;
                // SAFETY: its tag was loaded full just above (acquire or stronger for a
                // reader; the writer filled it itself); the caller holds the array.
                let s = unsafe { self.slot(i) };
                if s.hash == h && s.name.as_bytes() == name {
                    count_probes(probes);
                    return Ok(i);
                }
            }
            let empty = zero_bytes(w);
            if empty != 0 {
                count_probes(probes.max(1));
                return Err(if FREE { slots_of(g, empty).next() } else { None });
            }
            probes += 1;
            g = self.next_group(g);
        }
        count_probes(probes.max(1));
        Err(None)
    }

    /// Sets slot `i`'s tag (writer only).
    fn set_tag(&self, i: usize, tag: u8) {
        let word = self.tag_word(i / GROUP);
        let shift = 8 * (i % GROUP);
        let w = word.load(Ordering::Relaxed);
        word.store((w & !(0xff << shift)) | ((tag as u64) << shift), Ordering::Release);
    }

    /// Writes an entry into the first empty slot of its probe and publishes it (writer
    /// only; the caller keeps the array below [`Array::max_used`], so one is left).
    fn put(&self, h: u64, name: Name, value: Arc<T>) {
        let mut g = self.start(h);
        for _ in 0..self.groups() {
            if let Some(i) = slots_of(g, zero_bytes(self.tag_word(g).load(Ordering::Relaxed))).next() {
                self.fill(i, h, name, value);
                return;
            }
            g = self.next_group(g);
        }
        unreachable!("a DHash array filled past its load limit");
    }

    /// Writes an entry into the empty slot `i` and publishes it (writer only).
    #[inline(always)]
    fn fill(&self, i: usize, h: u64, name: Name, value: Arc<T>) {
        // SAFETY: an empty slot: no reader reads it before its tag is published below,
        // and the writer writes it only now.
        unsafe { self.slot_ptr(i).write(Slot { hash: h, name, value }) };
        self.set_tag(i, FULL | (h as u8 & 0x7f));
    }

    /// The writer's probe for an insert: the empty slot `put` would fill, when `name` is
    /// not in this array (`None`: it is, or no slot is empty). One pass: a miss stops at
    /// the first group with an empty slot, which is the one `put` writes into.
    #[inline(always)]
    fn free_for(self, h: u64, name: &[u8]) -> Option<usize> {
        // Relaxed: the caller is the writer, which wrote every tag.
        self.probe::<true, true>(h, name).err().flatten()
    }

    /// Frees the array, dropping the entries still full: the table's at its drop, or those
    /// of an array `drain` retired whole. Moved and removed entries are owned elsewhere
    /// (deleted tags).
    ///
    /// # Safety
    /// Nobody can reach the array any more.
    unsafe fn free(self) {
        for g in 0..self.groups() {
            for i in slots_of(g, self.tag_word(g).load(Ordering::Relaxed) & HIGHS) {
                // SAFETY: a full tag: the slot was written and still owns its entry.
                unsafe { std::ptr::drop_in_place(self.slot_ptr(i)) };
            }
        }
        let (_, layout) = Self::layout(self.groups());
        if Self::mapped(layout) {
            // SAFETY: mapped in `new` with this length; per the contract, unreachable.
            let _ = unsafe { rustix::mm::munmap(self.head.as_ptr().cast(), layout.size()) };
        } else {
            // SAFETY: allocated in `new` with this layout; per the contract, unreachable.
            unsafe { std::alloc::dealloc(self.head.as_ptr().cast(), layout) };
        }
    }
}

/// Reclaimer of a retired array (see [`Rcu::retire_with`]).
///
/// # Safety
/// `p` is an array of `T` that its table unpublished and handed to the collector, once.
unsafe fn reclaim_array<T>(p: *mut Head, _: &Collector) {
    // SAFETY: per the contract, nobody reaches it any more.
    crate::sync::in_reclaim_context(|| unsafe { Array::<T>::from_raw(p).free() });
}

/// What a lookup saw of one name ([`DHash::get_probed`]), for the insert or removal of
/// that name that follows under the writer's lock: the name's full slot (a hit) or the
/// empty slot an insert of it goes to (a miss), in the array then current, at the table's
/// version then. While the version has not moved ([`DHash::still`]) that is still so, and
/// the change needs no hash and no probe of its own: a create, whose walk's lockless
/// lookup already missed, and an unlink probe the name once.
/// 24 bytes: it rides in the walk's outcome. The array is the one current at the version
/// (every change of the current array is a change of the table).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Probe {
    /// The table's version before the lookup.
    version: u64,
    /// The name's hash.
    hash: u64,
    /// The slot; [`Probe::NO_SLOT`] for a miss that found no empty slot.
    slot: u32,
    /// Found (the slot is the name's) or not (the slot is empty).
    hit: bool,
}

impl Probe {
    const NO_SLOT: u32 = u32::MAX;
}

const _: () = assert!(size_of::<Probe>() == 24);

/// The table. `repr(C)`: what lookups read (the arrays, the sequence count, the hash key)
/// first, on one cache line; the writer's bookkeeping after it.
#[repr(C)]
pub struct DHash<T> {
    /// The array readers start in (null while the directory is empty); replaced by the
    /// writer when a rebuild ends, the old one retired.
    current: AtomicPtr<Head>,
    /// The array a rebuild is moving the entries into, null when none is under way. Set
    /// and cleared by the writer; readers that miss in `current` look here.
    future: AtomicPtr<Head>,
    /// Atomic, written by the writer: odd while a rebuild step moves entries or ends the
    /// rebuild (a sequence count for [`DHash::get_sure`]).
    resizing: AtomicU64,
    /// Immutable: keyed with [`table_seed`].
    hasher: foldhash::fast::FixedState,
    /// Atomic, written by the writer: bumped (release) when a change (an insert, a removal,
    /// a drain) is complete. A [`Probe`] taken at one version answers for its name while
    /// the version has not moved.
    version: AtomicU64,
    /// Writer-only: old groups already moved into `future`.
    moved: AtomicUsize,
    /// Writer-only: old groups each change moves during the rebuild under way.
    step: AtomicUsize,
    /// Writer-only: full and deleted slots of the array inserts go to (`future` during a
    /// rebuild, else `current`).
    used: AtomicUsize,
    /// Writer-only: number of entries.
    len: AtomicUsize,
    /// Debug check that writers are serialized.
    writing: AtomicBool,
    /// The arrays hold `Arc<T>`s.
    _values: PhantomData<Arc<T>>,
}

// What a lookup reads of the table itself is one line, at its start (a directory's
// `Dir` begins with its table and starts a line: see `dentry.rs`).
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(DHash<()>, hasher) + size_of::<foldhash::fast::FixedState>() <= 64);
    assert!(offset_of!(DHash<()>, resizing) < 64 && offset_of!(DHash<()>, future) < 64);
    assert!(offset_of!(DHash<()>, version) + size_of::<AtomicU64>() <= 64);
};

// SAFETY: a table of `Arc<T>` shared between threads: values are read by many threads and
// dropped by any (through the collector); names are plain bytes.
unsafe impl<T: Send + Sync> Send for DHash<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for DHash<T> {}

impl<T> Drop for DHash<T> {
    fn drop(&mut self) {
        for p in [*self.current.get_mut(), *self.future.get_mut()] {
            if !p.is_null() {
                // SAFETY: the table owns its arrays; being dropped, no reader can reach
                // them (reclamation rule).
                unsafe { Array::<T>::from_raw(p).free() };
            }
        }
    }
}

impl<T: Send + Sync + 'static> Default for DHash<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// The slots for `n` entries: about twice as many, so that the next rebuild is 3n/4
/// inserts away. Powers of two up to 64 (whose 32-byte-aligned arrays are an allocator
/// size class), then multiples of a group.
fn cap_for(n: usize) -> usize {
    let want = (2 * n).max(2);
    if want <= 64 { want.next_power_of_two() } else { want.next_multiple_of(GROUP) }
}

impl<T: Send + Sync + 'static> DHash<T> {
    /// An empty table (no array until the first insert).
    pub fn new() -> Self {
        DHash {
            current: AtomicPtr::new(std::ptr::null_mut()),
            future: AtomicPtr::new(std::ptr::null_mut()),
            moved: AtomicUsize::new(0),
            step: AtomicUsize::new(MOVE_PER_STEP),
            used: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            writing: AtomicBool::new(false),
            resizing: AtomicU64::new(0),
            hasher: foldhash::fast::FixedState::with_seed(table_seed()),
            version: AtomicU64::new(0),
            _values: PhantomData,
        }
    }

    #[inline(always)]
    fn hash(&self, name: &[u8]) -> u64 {
        self.hasher.hash_one(name)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lockless lookup; the reference lives as long as the guard. A hit is always right; a
    /// miss may be wrong if a rebuild step overlapped it (see the module docs): callers
    /// recheck a miss under the writer's lock, or use [`DHash::get_sure`].
    #[inline]
    pub(crate) fn get<'g>(&'g self, name: &[u8], guard: &'g LocalGuard<'_>) -> Option<&'g Arc<T>> {
        let h = self.hash(name);
        // SAFETY: an array is retired through the collector only once unpublished (the old
        // one when a rebuild ends, an emptied one, a drained one), so it outlives `guard`;
        // the table's own drop, which frees them directly, is excluded by the borrow of
        // `self`. A slot found full stays as written while the array lives.
        unsafe {
            let a = guard.protect(&self.current, Ordering::Acquire);
            if !a.is_null() {
                let a = Array::<T>::from_raw(a);
                if let Some(i) = a.find(h, name) {
                    return Some(&a.slot::<'g>(i).value);
                }
            }
            // A rebuild under way: what moved, and what was added since, is in the new array.
            let f = guard.protect(&self.future, Ordering::Acquire);
            if !f.is_null() {
                let f = Array::<T>::from_raw(f);
                if let Some(i) = f.find(h, name) {
                    return Some(&f.slot::<'g>(i).value);
                }
            }
        }
        None
    }

    /// Lockless lookup whose miss can be trusted: `Some(hit or None)`, or `None` when a
    /// rebuild step overlapped a miss (the caller looks again, or takes the writer's
    /// lock). Two extra loads, on the miss path only.
    #[inline]
    pub(crate) fn get_sure<'g>(&'g self, name: &[u8], guard: &'g LocalGuard<'_>) -> Option<Option<&'g Arc<T>>> {
        let seq = self.resizing.load(Ordering::Acquire);
        match self.get(name, guard) {
            Some(v) => Some(Some(v)),
            None => {
                // Seqlock read side: the tag loads above happen before this re-read.
                fence(Ordering::Acquire);
                (seq & 1 == 0 && self.resizing.load(Ordering::Relaxed) == seq).then_some(None)
            }
        }
    }

    /// Calls `f` with every entry, each once: the caller holds the writers off (a
    /// directory's lock, shared), so no entry is added, removed or moved meanwhile (a
    /// rebuild step marks a slot it moved deleted before the next change). The references
    /// live as long as the guard.
    pub(crate) fn for_each<'g>(&'g self, guard: &'g LocalGuard<'_>, mut f: impl FnMut(&'g Arc<T>)) {
        for p in [&self.current, &self.future] {
            // SAFETY: as in `get`: a published array outlives `guard`, and a slot loaded
            // full stays as written while the array lives.
            unsafe {
                let a = guard.protect(p, Ordering::Acquire);
                if a.is_null() {
                    continue;
                }
                let a = Array::<T>::from_raw(a);
                for g in 0..a.groups() {
                    for i in slots_of(g, a.tag_word(g).load(Ordering::Acquire) & HIGHS) {
                        f(&a.slot::<'g>(i).value);
                    }
                }
            }
        }
    }

    /// Inserts or replaces; returns the value replaced. The caller serializes writers.
    pub(crate) fn insert(&self, name: Name, value: Arc<T>, rcu: &Rcu) -> Option<Arc<T>> {
        let _w = WriterCheck::enter(&self.writing);
        let h = self.hash(name.as_bytes());
        // No rebuild under way and room left (most inserts): one probe finds that the name
        // is new and where it goes, instead of a removal's probe and then the put's.
        let (cur, fut) = (self.current.load(Ordering::Relaxed), self.future.load(Ordering::Relaxed));
        if fut.is_null() && !cur.is_null() {
            // SAFETY: only this (serialized) writer replaces or frees the arrays.
            let a = unsafe { Array::<T>::from_raw(cur) };
            let used = self.used.load(Ordering::Relaxed);
            if used < a.max_used()
                && let Some(i) = a.free_for(h, name.as_bytes())
            {
                self.fill_new(a, i, h, name, value, used);
                return None;
            }
        }
        self.insert_slow(h, name, value, rcu)
    }

    /// An insert of a new name into the empty slot `i` of the current array `a`, outside a
    /// rebuild and with room left (`used`, below `max_used`): the two ways an insert knows
    /// its slot without a second probe (its own miss, or a probe's).
    #[inline(always)]
    fn fill_new(&self, a: Array<T>, i: usize, h: u64, name: Name, value: Arc<T>, used: usize) {
        a.fill(i, h, name, value);
        self.used.store(used + 1, Ordering::Relaxed);
        self.len.store(self.len() + 1, Ordering::Relaxed);
        self.changed();
    }

    /// An insert that could not take the one-probe path: a removal of the name, then a
    /// put (in the new array during a rebuild, which it steps).
    fn insert_slow(&self, h: u64, name: Name, value: Arc<T>, rcu: &Rcu) -> Option<Arc<T>> {
        let old = self.remove_locked(h, name.as_bytes(), rcu).map(|v| Self::handed_out(v, rcu));
        let mut target = self.future.load(Ordering::Relaxed);
        if target.is_null() {
            target = self.current.load(Ordering::Relaxed);
            if target.is_null() {
                target = Array::<T>::new(cap_for(1)).into_raw();
                self.used.store(0, Ordering::Relaxed);
                // Published empty; the entry goes in below.
                self.current.store(target, Ordering::Release);
            } else {
                // SAFETY: only this (serialized) writer replaces or frees the arrays.
                let full = self.used.load(Ordering::Relaxed) + 1 > unsafe { Array::<T>::from_raw(target) }.max_used();
                if full {
                    target = self.rebuild_start(self.len() + 1);
                }
            }
        }
        // SAFETY: as above. A rebuild's array has room for every entry it can receive
        // before its last step (`rebuild_start`).
        unsafe { Array::<T>::from_raw(target) }.put(h, name, value);
        self.used.store(self.used.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        self.len.store(self.len() + 1, Ordering::Relaxed);
        self.rebuild_step(rcu);
        self.changed();
        old
    }

    /// A change is complete: probes taken before it no longer answer ([`Probe`]). Release,
    /// so that a lockless lookup that reads the new version sees the whole change.
    #[inline(always)]
    fn changed(&self) {
        self.version.store(self.version.load(Ordering::Relaxed) + 1, Ordering::Release);
    }

    /// A lookup that also says what it saw, for an insert or removal of the same name
    /// that follows under the writer's lock ([`DHash::insert_probed`],
    /// [`DHash::remove_probed`]): as [`DHash::get_sure`], with a [`Probe`] when no
    /// rebuild was under way. Lockless, or by the writer.
    #[inline]
    pub(crate) fn get_probed<'g>(
        &'g self,
        name: &[u8],
        guard: &'g LocalGuard<'_>,
    ) -> Option<(Option<&'g Arc<T>>, Option<Probe>)> {
        // Before the tags: a version read here that is still the table's under the lock
        // later says that no change came between (each bumps it once complete).
        let version = self.version.load(Ordering::Acquire);
        let seq = self.resizing.load(Ordering::Acquire);
        // SAFETY: as in `get`: the array outlives `guard`, and a full slot stays as written.
        unsafe {
            let a = guard.protect(&self.current, Ordering::Acquire);
            if a.is_null() || !guard.protect(&self.future, Ordering::Acquire).is_null() {
                return self.get_sure(name, guard).map(|found| (found, None));
            }
            let arr = Array::<T>::from_raw(a);
            let h = self.hash(name);
            // Slots are fewer than 2^32 (an array of them would take 128 GiB).
            let probe = |slot: usize, hit| Some(Probe { version, hash: h, slot: slot as u32, hit });
            match arr.probe::<false, true>(h, name) {
                Ok(i) => Some((Some(&arr.slot::<'g>(i).value), probe(i, true))),
                Err(free) => {
                    // Seqlock read side, as `get_sure`: a miss is certain only when no
                    // rebuild step overlapped it.
                    fence(Ordering::Acquire);
                    let sure = seq & 1 == 0 && self.resizing.load(Ordering::Relaxed) == seq;
                    sure.then(|| (None, probe(free.map_or(Probe::NO_SLOT as usize, |i| i), false)))
                }
            }
        }
    }

    /// Whether `p` still answers for its name: no change since it was taken. The writer's
    /// check, under its lock (which orders the load).
    #[inline]
    pub(crate) fn still(&self, p: &Probe) -> bool {
        self.version.load(Ordering::Relaxed) == p.version
    }

    /// The array a probe that [`DHash::still`] vouches for was taken in: the current one
    /// (writer only).
    fn probed_array(&self) -> Array<T> {
        // SAFETY: not null: the probe was taken in it, and emptying the table is a change.
        // Only this (serialized) writer replaces or frees the arrays.
        unsafe { Array::<T>::from_raw(self.current.load(Ordering::Relaxed)) }
    }

    /// The value a hit `p` found, while [`DHash::still`] vouches for it (writer only).
    pub(crate) fn probed<'g>(&'g self, p: &Probe, _guard: &'g LocalGuard<'_>) -> Option<&'g Arc<T>> {
        if !p.hit || !self.still(p) {
            return None;
        }
        // SAFETY: the array is still the current one and unchanged since the probe saw the
        // slot full (`still`); it is retired only by a later change, after `_guard`'s
        // readers, and the slot is not written again while it lives.
        Some(unsafe { &self.probed_array().slot::<'g>(p.slot as usize).value })
    }

    /// [`DHash::insert`] of the name a miss `p` was taken for: into the empty slot the
    /// probe found, with no hash and no probe, if nothing changed since; else the usual
    /// insert. The caller serializes writers.
    pub(crate) fn insert_probed(&self, p: Option<Probe>, name: Name, value: Arc<T>, rcu: &Rcu) -> Option<Arc<T>> {
        if let Some(p) = p
            && !p.hit
            && p.slot != Probe::NO_SLOT
            && self.still(&p)
        {
            let _w = WriterCheck::enter(&self.writing);
            debug_assert_eq!(p.hash, self.hash(name.as_bytes()), "a probe of another name");
            // No rebuild is under way: the probe saw none, and starting one is a change.
            let a = self.probed_array();
            let used = self.used.load(Ordering::Relaxed);
            if used < a.max_used() {
                self.fill_new(a, p.slot as usize, p.hash, name, value, used);
                return None;
            }
            return self.insert_slow(p.hash, name, value, rcu);
        }
        self.insert(name, value, rcu)
    }

    /// [`DHash::remove`] of the name a hit `p` was taken for: from the slot the probe
    /// found, with no hash and no probe, if nothing changed since; else the usual removal.
    /// The caller serializes writers.
    pub(crate) fn remove_probed(&self, p: Option<Probe>, name: &[u8], rcu: &Rcu) -> Option<Arc<T>> {
        self.remove_probed_by(p, name, rcu, Self::handed_out)
    }

    /// As [`DHash::remove_probed`], for a caller that only needs to see the value removed
    /// (`f`) before the table's reference to it is retired: no count is taken for it.
    /// Whether `name` was there.
    pub(crate) fn delete_probed(&self, p: Option<Probe>, name: &[u8], rcu: &Rcu, f: impl FnOnce(&T)) -> bool {
        self.remove_probed_by(p, name, rcu, |v, rcu| {
            f(&v);
            rcu.defer_drop_arc(v);
        })
        .is_some()
    }

    /// A removed value handed to the caller: a count of its own, the table's retired
    /// (readers may still be looking at it).
    fn handed_out(v: Arc<T>, rcu: &Rcu) -> Arc<T> {
        let out = v.clone();
        rcu.defer_drop_arc(v);
        out
    }

    /// The removals by probe: `out` gets the table's own reference to the value taken out,
    /// and must retire it through the collector (or keep it alive past every reader).
    fn remove_probed_by<R>(
        &self,
        p: Option<Probe>,
        name: &[u8],
        rcu: &Rcu,
        out: impl FnOnce(Arc<T>, &Rcu) -> R,
    ) -> Option<R> {
        let _w = WriterCheck::enter(&self.writing);
        let v = match p {
            Some(p) if p.hit && self.still(&p) => {
                // The slot is full: the probe saw it so, and nothing changed since.
                let a = self.probed_array();
                // SAFETY: a full slot of a live array, which this writer holds.
                debug_assert!(unsafe { a.slot(p.slot as usize) }.name.as_bytes() == name, "a probe of another name");
                self.take(a, p.slot as usize, rcu)
            }
            _ => self.remove_locked(self.hash(name), name, rcu)?,
        };
        let r = out(v, rcu);
        self.removed(rcu);
        Some(r)
    }

    /// Removes every entry and returns their values (instance teardown). The caller
    /// serializes writers. The arrays are retired whole, readers still on them finish.
    pub(crate) fn drain(&self, rcu: &Rcu) -> Vec<Arc<T>> {
        let _w = WriterCheck::enter(&self.writing);
        let mut out = Vec::with_capacity(self.len());
        for p in [
            self.current.swap(std::ptr::null_mut(), Ordering::AcqRel),
            self.future.swap(std::ptr::null_mut(), Ordering::AcqRel),
        ] {
            if p.is_null() {
                continue;
            }
            // SAFETY: `p` was one of the table's arrays, which only the (serialized) writer
            // frees; a full slot owns its entry until the array is dropped.
            unsafe {
                let a = Array::<T>::from_raw(p);
                for g in 0..a.groups() {
                    for i in slots_of(g, a.tag_word(g).load(Ordering::Acquire) & HIGHS) {
                        out.push(a.slot(i).value.clone());
                    }
                }
                // No longer published; freeing it drops the entries it still holds.
                rcu.retire_with(p, reclaim_array::<T>);
            }
        }
        self.moved.store(0, Ordering::Relaxed);
        self.used.store(0, Ordering::Relaxed);
        self.len.store(0, Ordering::Relaxed);
        self.changed();
        out
    }

    /// Removes; returns the value removed. The caller serializes writers.
    #[cfg(test)]
    pub(crate) fn remove(&self, name: &[u8], rcu: &Rcu) -> Option<Arc<T>> {
        self.remove_probed_by(None, name, rcu, Self::handed_out)
    }

    /// After a removal: the rebuild's step, an emptied array given back, the change
    /// complete.
    fn removed(&self, rcu: &Rcu) {
        self.rebuild_step(rcu);
        // An emptied directory gives its array back (rm -rf, churn).
        if self.is_empty() && self.future.load(Ordering::Relaxed).is_null() {
            let a = self.current.swap(std::ptr::null_mut(), Ordering::AcqRel);
            self.used.store(0, Ordering::Relaxed);
            // SAFETY: unpublished; its slots are all deleted, so freeing it drops
            // nothing, after the readers still on it have left.
            unsafe { rcu.retire_with(a, reclaim_array::<T>) };
        }
        self.changed();
    }

    /// Takes `name`'s entry out of whichever array holds it: the table's own reference
    /// (see [`DHash::take`]).
    fn remove_locked(&self, h: u64, name: &[u8], rcu: &Rcu) -> Option<Arc<T>> {
        for p in [self.current.load(Ordering::Relaxed), self.future.load(Ordering::Relaxed)] {
            if p.is_null() {
                continue;
            }
            // SAFETY: only the (serialized) writer frees or replaces the arrays.
            let a = unsafe { Array::<T>::from_raw(p) };
            if let Some(i) = a.find(h, name) {
                return Some(self.take(a, i, rcu));
            }
        }
        None
    }

    /// Takes the entry of the full slot `i` of `a`, one of the table's arrays, out
    /// (writer only). Returns the table's own reference to its value, which readers may
    /// still be looking at: the caller retires it through the collector (or keeps it alive
    /// longer).
    fn take(&self, a: Array<T>, i: usize, rcu: &Rcu) -> Arc<T> {
        a.set_tag(i, DELETED);
        // SAFETY: the slot was full and is now deleted: this takes its entry out once (the
        // array's drop skips deleted slots). Its bytes stay as they are for readers still
        // comparing them, and what they point to (the value, a long name's bytes) is
        // dropped only after those readers left.
        let Slot { name, value, .. } = unsafe { a.slot_ptr(i).read() };
        if name.as_bytes().len() > Name::INLINE {
            // SAFETY: a fresh box, unreachable by anyone.
            unsafe { rcu.retire_box(Box::into_raw(Box::new(name))) };
        } else {
            drop(name);
        }
        self.len.store(self.len() - 1, Ordering::Relaxed);
        value
    }

    /// Starts a rebuild: publishes an empty array sized for `n` entries (the live ones and
    /// the one being inserted), which new entries go to and the next steps fill with the
    /// old ones. Each change moves at least [`MOVE_PER_STEP`] old groups, more when the old
    /// array is mostly deleted slots (the new one then small), so that the move ends
    /// within half the new array's spare room: changes add at most one slot each.
    fn rebuild_start(&self, n: usize) -> *mut Head {
        let new = Array::<T>::new(cap_for(n));
        // SAFETY: a rebuild starts from the current array, which only this (serialized)
        // writer replaces or frees.
        let old_groups = unsafe { Array::<T>::from_raw(self.current.load(Ordering::Relaxed)) }.groups();
        let changes = ((new.max_used() - n) / 2).max(1);
        self.step.store(old_groups.div_ceil(changes).max(MOVE_PER_STEP), Ordering::Relaxed);
        let f = new.into_raw();
        self.moved.store(0, Ordering::Relaxed);
        self.used.store(0, Ordering::Relaxed);
        // Published complete (empty) before any entry goes in.
        self.future.store(f, Ordering::Release);
        f
    }

    /// One step of a rebuild under way (none: nothing to do): moves the entries of the
    /// next few old groups (`step`) into the new array; the step that moves the last one
    /// publishes the new array and retires the old one (emptied) through the collector.
    /// Inside the resize sequence: readers' misses meanwhile are not trusted by
    /// [`DHash::get_sure`].
    fn rebuild_step(&self, rcu: &Rcu) {
        let f = self.future.load(Ordering::Relaxed);
        if f.is_null() {
            return;
        }
        // SAFETY: only this (serialized) writer replaces or frees the arrays.
        let (old, new) =
            unsafe { (Array::<T>::from_raw(self.current.load(Ordering::Relaxed)), Array::<T>::from_raw(f)) };
        let seq = self.resizing.load(Ordering::Relaxed);
        self.resizing.store(seq + 1, Ordering::Relaxed);
        // Seqlock write side: the odd count is visible before any entry moves.
        fence(Ordering::Release);
        let start = self.moved.load(Ordering::Relaxed);
        let end = (start + self.step.load(Ordering::Relaxed)).min(old.groups());
        let mut used = self.used.load(Ordering::Relaxed);
        for g in start..end {
            let w = old.tag_word(g).load(Ordering::Relaxed);
            let full = w & HIGHS;
            for i in slots_of(g, full) {
                // SAFETY: a full slot of the old array: its entry is read out once, then
                // owned by the new array's slot; the old tags are deleted after the new
                // ones are published, so a reader finds the entry in one array or the
                // other (or both, the same), and the old array's drop skips it.
                let s = unsafe { old.slot_ptr(i).read() };
                new.put(s.hash, s.name, s.value);
                used += 1;
            }
            if full != 0 {
                // The group's full tags deleted at once (0x80 bits -> 0x01 bytes); empty
                // ones stay empty.
                old.tag_word(g).store((w & !((full >> 7) * 0xff)) | ((full >> 7) * DELETED as u64), Ordering::Release);
            }
        }
        self.used.store(used, Ordering::Relaxed);
        self.moved.store(end, Ordering::Relaxed);
        if end == old.groups() {
            // Readers start in the new array from now on; one that started in the old
            // array and finds no rebuild under way is inside this step's sequence.
            let old = self.current.swap(f, Ordering::AcqRel);
            self.future.store(std::ptr::null_mut(), Ordering::Release);
            self.resizing.store(seq + 2, Ordering::Release);
            // SAFETY: `old` is still alive (retired just below).
            let big = unsafe { Array::<T>::from_raw(old) }.cap() >= FLUSH_SLOTS;
            // SAFETY: `old` is unpublished and holds no entry; readers still on it are
            // waited for.
            unsafe { rcu.retire_with(old, reclaim_array::<T>) };
            if big {
                rcu.flush();
            }
        } else {
            self.resizing.store(seq + 2, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(i: usize) -> Vec<u8> {
        // Every seventh name too long to be kept inline.
        if i % 7 == 3 {
            format!("a-name-longer-than-fifteen-bytes-{i}").into_bytes()
        } else {
            format!("n{i}").into_bytes()
        }
    }

    fn rebuilding<T>(t: &DHash<T>) -> bool {
        !t.future.load(Ordering::Relaxed).is_null()
    }

    fn cap<T>(t: &DHash<T>) -> usize {
        let p = t.current.load(Ordering::Relaxed);
        // SAFETY: the test is the only writer; the array is alive while published.
        if p.is_null() { 0 } else { unsafe { Array::<T>::from_raw(p) }.cap() }
    }

    /// `for_each` sees every entry once, also while a rebuild has moved some of them into
    /// the new array and not others, and none that was removed.
    #[test]
    fn for_each_sees_each_entry_once_mid_rebuild() {
        let rcu = Rcu::new();
        let t: DHash<usize> = DHash::new();
        let mut seen_mid_rebuild = false;
        let mut live = std::collections::BTreeSet::new();
        for i in 0..if cfg!(miri) { 150 } else { 600 } {
            t.insert(Name::new(&name(i)), Arc::new(i), &rcu);
            live.insert(i);
            if i % 5 == 0 {
                t.remove(&name(i / 2), &rcu);
                live.remove(&(i / 2));
            }
            let g = rcu.pin();
            let mut got = Vec::new();
            t.for_each(&g, |v| got.push(**v));
            got.sort_unstable();
            assert_eq!(got, live.iter().copied().collect::<Vec<_>>(), "after {i}");
            seen_mid_rebuild |= rebuilding(&t);
        }
        assert!(seen_mid_rebuild, "no step of the test found a rebuild under way");
    }

    #[test]
    fn insert_get_remove_across_rebuilds() {
        let rcu = Rcu::new();
        let t: DHash<usize> = DHash::new();
        let n = if cfg!(miri) { 200 } else { 2000 };
        for i in 0..n {
            assert_eq!(t.insert(Name::new(&name(i)), Arc::new(i), &rcu), None);
        }
        assert_eq!(t.len(), n);
        let g = rcu.pin();
        for i in 0..n {
            assert_eq!(t.get_sure(&name(i), &g).flatten().map(|v| **v), Some(i), "{i}");
        }
        assert_eq!(t.get_sure(b"absent", &g), Some(None));
        assert_eq!(t.insert(Name::new(&name(7)), Arc::new(70), &rcu).map(|v| *v), Some(7));
        assert_eq!(t.get(&name(7), &g).map(|v| **v), Some(70));
        for i in (0..n).step_by(2) {
            assert!(t.remove(&name(i), &rcu).is_some(), "remove {i}");
        }
        assert_eq!(t.len(), n / 2);
        assert_eq!(t.get(&name(2), &g), None);
        assert_eq!(t.get(&name(3), &g).map(|v| **v), Some(3));
        assert_eq!(t.remove(b"nope", &rcu), None);
        // An emptied table gives its array back.
        for i in (1..n).step_by(2) {
            assert!(t.remove(&name(i), &rcu).is_some(), "remove {i}");
        }
        assert!(t.is_empty());
        assert_eq!(cap(&t), 0);
        assert_eq!(t.get_sure(&name(1), &g), Some(None));
    }

    /// A probe answers only while the table has not changed: an insert or removal through
    /// a stale one takes the usual path and leaves the table right (no second entry, the
    /// right one removed); a fresh one is used as it is (no lookup: counted in debug
    /// builds); none is made while a rebuild is under way.
    #[test]
    fn probes_answer_only_while_nothing_changed() {
        let rcu = Rcu::new();
        let g = rcu.pin();
        let t: DHash<usize> = DHash::new();
        for i in 0..40 {
            t.insert(Name::new(&name(i)), Arc::new(i), &rcu);
        }
        while rebuilding(&t) {
            t.insert(Name::new(b"pad"), Arc::new(0), &rcu);
        }
        let probe = |n: &[u8]| t.get_probed(n, &g).expect("no rebuild under way").1;
        // A fresh miss: filled in place, no lookup.
        let p = probe(b"x");
        assert!(p.is_some_and(|p| !p.hit && t.still(&p)));
        let before = crate::sync::counters::counters().dir_lookups;
        assert_eq!(t.insert_probed(p, Name::new(b"x"), Arc::new(1), &rcu), None);
        if cfg!(debug_assertions) {
            assert_eq!(crate::sync::counters::counters().dir_lookups, before, "the probed insert looked up");
        }
        assert_eq!(t.get(b"x", &g).map(|v| **v), Some(1));
        // A miss gone stale: another name came in meanwhile, then the same name.
        let p = probe(b"y");
        t.insert(Name::new(b"z"), Arc::new(2), &rcu);
        assert!(p.is_some_and(|p| !t.still(&p)));
        assert_eq!(t.insert_probed(p, Name::new(b"y"), Arc::new(3), &rcu), None);
        let p = probe(b"w");
        t.insert(Name::new(b"w"), Arc::new(4), &rcu);
        assert_eq!(t.insert_probed(p, Name::new(b"w"), Arc::new(5), &rcu).map(|v| *v), Some(4), "replaced");
        let len = t.len();
        assert_eq!(t.remove(b"w", &rcu).map(|v| *v), Some(5));
        assert_eq!((t.get(b"w", &g), t.len()), (None, len - 1), "a second entry was left");
        // A fresh hit: removed from its slot.
        let p = probe(b"x");
        assert!(p.is_some_and(|p| p.hit));
        assert_eq!(t.remove_probed(p, b"x", &rcu).map(|v| *v), Some(1));
        assert_eq!(t.get(b"x", &g), None);
        // A hit gone stale: the name removed and put back (elsewhere) meanwhile.
        let p = probe(b"y");
        assert_eq!(t.remove(b"y", &rcu).map(|v| *v), Some(3));
        t.insert(Name::new(b"y"), Arc::new(6), &rcu);
        assert_eq!(t.remove_probed(p, b"y", &rcu).map(|v| *v), Some(6));
        assert_eq!(t.get(b"y", &g), None);
        // A hit gone stale by a removal alone: the probed removal finds nothing.
        let p = probe(b"z");
        assert_eq!(t.remove(b"z", &rcu).map(|v| *v), Some(2));
        assert!(p.is_some_and(|p| !t.still(&p)));
        assert_eq!(t.remove_probed(p, b"z", &rcu), None);
        // Every other entry is still found.
        for i in 0..40 {
            assert_eq!(t.get(&name(i), &g).map(|v| **v), Some(i));
        }
        // No probe while a rebuild moves entries.
        let mut k = 0;
        while !rebuilding(&t) {
            t.insert(Name::new(format!("grow{k}").as_bytes()), Arc::new(k), &rcu);
            k += 1;
        }
        assert!(t.get_probed(b"q", &g).is_some_and(|(found, p)| found.is_none() && p.is_none()));
    }

    /// An insert of a name already there replaces it, rebuild or not: the one-probe insert
    /// (no rebuild under way) must not add a second entry beside the first.
    #[test]
    fn inserting_a_present_name_replaces_it() {
        let rcu = Rcu::new();
        let g = rcu.pin();
        let mut outside = 0;
        for k in 1..120 {
            let t: DHash<usize> = DHash::new();
            for i in 0..k {
                assert_eq!(t.insert(Name::new(&name(i)), Arc::new(i), &rcu), None);
            }
            outside += usize::from(!rebuilding(&t));
            let j = k / 2;
            assert_eq!(t.insert(Name::new(&name(j)), Arc::new(1000 + j), &rcu).map(|v| *v), Some(j), "{k}");
            assert_eq!(t.len(), k);
            assert_eq!(t.get(&name(j), &g).map(|v| **v), Some(1000 + j));
            assert_eq!(t.remove(&name(j), &rcu).map(|v| *v), Some(1000 + j));
            assert_eq!(t.get_sure(&name(j), &g), Some(None), "a second entry of {j} left, {k} entries");
        }
        assert!(outside > 60, "most sizes had no rebuild under way: {outside}");
    }

    /// A rebuild is spread over changes: each moves a few old groups, every entry is found
    /// (and sure) between steps, entries added or removed meanwhile are where they should
    /// be, and no array fills up, also when churn leaves mostly deleted slots.
    #[test]
    fn rebuilds_move_a_few_groups_per_change() {
        let rcu = Rcu::new();
        let t: DHash<usize> = DHash::new();
        let total = if cfg!(miri) { 300 } else { 3000 };
        let (mut rebuilds, mut steps_seen) = (0, 0);
        for i in 0..total {
            let before = t.moved.load(Ordering::Relaxed);
            let (was, array) = (rebuilding(&t), t.current.load(Ordering::Relaxed));
            t.insert(Name::new(&name(i)), Arc::new(i), &rcu);
            if was && rebuilding(&t) {
                steps_seen += 1;
                assert!(t.moved.load(Ordering::Relaxed) - before <= t.step.load(Ordering::Relaxed));
            }
            if !array.is_null() && !was && (rebuilding(&t) || t.current.load(Ordering::Relaxed) != array) {
                rebuilds += 1;
            }
            if i % 7 == 0 {
                assert_eq!(t.remove(&name(i / 2), &rcu).map(|v| *v), Some(i / 2), "remove {} at insert {i}", i / 2);
                t.insert(Name::new(&name(i / 2)), Arc::new(i / 2), &rcu);
            }
            let g = rcu.pin();
            for j in [0, i / 3, i / 2, i] {
                assert_eq!(t.get_sure(&name(j), &g).flatten().map(|v| **v), Some(j), "entry {j} after insert {i}");
            }
            assert_eq!(t.get_sure(b"absent", &g), Some(None));
        }
        // 2, 4, 8 ... 120, 216, 384 slots (and on to 4K without Miri).
        assert!(rebuilds >= 8 && steps_seen > 0, "{rebuilds} rebuilds, {steps_seen} steps seen");
        assert_eq!(t.len(), total);
        // Churn at a steady size: the array stays about twice the live entries.
        let live = t.len();
        for r in 0..if cfg!(miri) { 2 } else { 10 } {
            for i in 0..live {
                t.remove(&name(i), &rcu).unwrap();
                t.insert(Name::new(&name(i)), Arc::new(i + r), &rcu);
            }
        }
        assert!(cap(&t) <= 4 * live, "{} slots for {live} entries", cap(&t));
        // Mostly removed, then refilled: the small new array never fills while the big old
        // one is moved.
        for i in 10..live {
            t.remove(&name(i), &rcu).unwrap();
        }
        for i in 0..live {
            t.insert(Name::new(&name(total + i)), Arc::new(i), &rcu);
            if i % 3 == 0 {
                t.remove(&name(total + i), &rcu).unwrap();
            }
        }
        let g = rcu.pin();
        assert!((0..10).all(|i| t.get(&name(i), &g).is_some()));
        // Drained in the middle of a rebuild: every value once.
        let mut n = 0;
        while !rebuilding(&t) {
            t.insert(Name::new(&name(10 * total + n)), Arc::new(n), &rcu);
            n += 1;
        }
        let expect = t.len();
        let all = t.drain(&rcu);
        assert_eq!(all.len(), expect);
        assert!(t.is_empty() && cap(&t) == 0);
    }

    /// Readers on another thread while the writer inserts, rebuilds and removes: every hit
    /// is the right entry, and a name that is there the whole time is always found (for
    /// certain, or reported unsure during a step). Miri checks the accesses for races.
    #[test]
    fn lockless_readers_while_the_writer_changes_the_table() {
        let rcu = Rcu::new();
        let t: DHash<Vec<u8>> = DHash::new();
        let stay = name(3);
        t.insert(Name::new(&stay), Arc::new(stay.clone()), &rcu);
        let n = if cfg!(miri) { 120 } else { 5000 };
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut i = 0;
                while !done.load(Ordering::Relaxed) || i < 10 {
                    let g = rcu.pin();
                    match t.get_sure(&stay, &g) {
                        Some(Some(v)) => assert_eq!(**v, stay),
                        Some(None) => panic!("a name that stays was missed for certain"),
                        None => {}
                    }
                    for k in [i % n, (i * 7) % n] {
                        if let Some(v) = t.get(&name(100 + k), &g) {
                            assert_eq!(**v, name(100 + k));
                        }
                    }
                    i += 1;
                }
            });
            for k in 0..n {
                t.insert(Name::new(&name(100 + k)), Arc::new(name(100 + k)), &rcu);
                if k % 3 == 0 {
                    t.remove(&name(100 + k / 2), &rcu);
                }
            }
            for k in 0..n {
                t.remove(&name(100 + k), &rcu);
            }
            done.store(true, Ordering::Relaxed);
        });
        assert_eq!(t.len(), 1);
    }

    /// The walk's handoff: probes taken by a lockless reader while the writer changes the
    /// table, then used by the writer. Whatever a probe still vouches for (`still`) is
    /// true of the table then (a miss: the name is absent; a hit: it is there, in that
    /// slot); the writer changes the table through them, and it ends as the model says.
    #[test]
    fn lockless_probes_handed_to_the_writer() {
        let rcu = Rcu::new();
        let t: DHash<usize> = DHash::new();
        let names = if cfg!(miri) { 24 } else { 200 };
        let steps = if cfg!(miri) { 60 } else { 20_000 };
        let all: Vec<Vec<u8>> = (0..names).map(name).collect();
        // Never removed: an empty table has no array, and no probe is made of it.
        t.insert(Name::new(b"stays"), Arc::new(0), &rcu);
        let done = AtomicBool::new(false);
        // Bounded: probes the writer has no room for are dropped, not queued up stale.
        let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, Probe)>(16);
        let mut model = std::collections::BTreeMap::new();
        // (probes used, probes stale on arrival)
        let mut used = (0, 0);
        /// Uses the probe of name `k` if it is still good.
        fn apply(
            t: &DHash<usize>,
            rcu: &Rcu,
            model: &mut std::collections::BTreeMap<usize, usize>,
            used: &mut (usize, usize),
            k: usize,
            p: Probe,
            step: usize,
        ) {
            if !t.still(&p) {
                used.1 += 1;
                return;
            }
            used.0 += 1;
            assert_eq!(p.hit, model.contains_key(&k), "a probe still vouched for was wrong");
            if p.hit {
                assert_eq!(t.remove_probed(Some(p), &name(k), rcu).map(|v| *v), model.remove(&k));
            } else {
                assert_eq!(t.insert_probed(Some(p), Name::new(&name(k)), Arc::new(step), rcu), None);
                model.insert(k, step);
            }
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut i = 0;
                while !done.load(Ordering::Relaxed) {
                    let g = rcu.pin();
                    for _ in 0..32 {
                        if let Some((_, Some(p))) = t.get_probed(&all[i % names], &g)
                            && let Err(std::sync::mpsc::TrySendError::Disconnected(_)) = tx.try_send((i % names, p))
                        {
                            return;
                        }
                        i += 7;
                    }
                }
            });
            // The reader running before the writer starts.
            let (k, p) = rx.recv().expect("the reader probes until done");
            apply(&t, &rcu, &mut model, &mut used, k, p, 0);
            let mut x: u64 = 11;
            for step in 0..steps {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = (x % names as u64) as usize;
                if x.is_multiple_of(3) {
                    assert_eq!(t.remove(&name(k), &rcu).map(|v| *v), model.remove(&k));
                } else {
                    assert_eq!(t.insert(Name::new(&name(k)), Arc::new(step), &rcu).map(|v| *v), model.insert(k, step));
                }
                while let Ok((k, p)) = rx.try_recv() {
                    apply(&t, &rcu, &mut model, &mut used, k, p, step);
                }
            }
            // Then with the table still (no rebuild left under way, during which no probe is
            // made: changes of a name outside the model step it): the reader's next probe
            // is good, and used.
            for step in steps..steps + 20 {
                while rebuilding(&t) {
                    t.insert(Name::new(b"pad"), Arc::new(0), &rcu);
                    t.remove(b"pad", &rcu);
                }
                let before = used.0;
                while used.0 == before {
                    let (k, p) = rx.recv().expect("the reader probes until done");
                    apply(&t, &rcu, &mut model, &mut used, k, p, step);
                }
            }
            done.store(true, Ordering::Relaxed);
        });
        let g = rcu.pin();
        assert_eq!(t.len(), model.len() + 1);
        for k in 0..names {
            assert_eq!(t.get(&name(k), &g).map(|v| **v), model.get(&k).copied(), "{k}");
        }
    }

    #[test]
    fn tags_match_exactly() {
        // Bytes 0 (empty), 1 (deleted) and full tags 0x80..0xff.
        let w = u64::from_le_bytes([0x00, 0x01, 0x80, 0xff, 0x81, 0x00, 0x7f, 0xfe]);
        assert_eq!(zero_bytes(w), 0x0000_8000_0000_0080);
        let tag = 0x81u64 * LOWS;
        assert_eq!(zero_bytes(w ^ tag), 0x0000_0080_0000_0000);
        assert_eq!(w & HIGHS, 0x8000_0080_8080_0000);
    }
}
