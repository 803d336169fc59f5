use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use uvfs::{DirFd, OpenFlags, Vfs, VfsConfig};
struct Counting;
thread_local! { static ON: Cell<bool> = const { Cell::new(false) }; static LOG: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) }; }
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if ON.with(|o| o.get()) {
            ON.with(|o| o.set(false));
            LOG.with(|v| v.borrow_mut().push(l.size()));
            ON.with(|o| o.set(true));
        }
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
}
#[global_allocator]
static G: Counting = Counting;
#[test]
fn show() {
    let vfs = Vfs::new(VfsConfig::default());
    let t = vfs.root_task();
    t.mkdir(b"/d", 0o755).unwrap();
    for i in 0..200 {
        let fd =
            t.openat(DirFd::Cwd, format!("/d/w{i}").as_bytes(), OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
        t.close(fd).unwrap();
    }
    for k in 0..3 {
        ON.with(|o| o.set(true));
        let fd =
            t.openat(DirFd::Cwd, format!("/d/f{k}").as_bytes(), OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
        ON.with(|o| o.set(false));
        let a = LOG.with(|v| std::mem::take(&mut *v.borrow_mut()));
        ON.with(|o| o.set(true));
        t.close(fd).unwrap();
        ON.with(|o| o.set(false));
        let b = LOG.with(|v| std::mem::take(&mut *v.borrow_mut()));
        eprintln!("open: {a:?}  close: {b:?}");
    }
}
