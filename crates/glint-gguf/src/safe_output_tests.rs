use std::io::Write;

use super::*;

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn target_replaced_only_at_commit() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("out.bin");
    std::fs::write(&target, b"old").unwrap();
    let mut out = SafeOutput::create(&target, &[]).unwrap();
    out.file().write_all(b"new contents").unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"old");
    let temp = out.temp_path().to_path_buf();
    assert!(temp.exists());
    assert!(!temp.to_string_lossy().ends_with(".gguf"));
    out.commit().unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"new contents");
    assert_eq!(names(dir.path()), ["out.bin"]);
}

#[test]
fn temp_removed_when_dropped_uncommitted() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("out.bin");
    std::fs::write(&target, b"old").unwrap();
    {
        let mut out = SafeOutput::create(&target, &[]).unwrap();
        out.file().write_all(b"partial").unwrap();
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"old");
    assert_eq!(names(dir.path()), ["out.bin"]);
}

#[test]
fn refuses_directory_and_missing_dir() {
    let dir = tempfile::tempdir().unwrap();
    let e = SafeOutput::create(dir.path(), &[]).unwrap_err();
    assert!(matches!(e, OutputError::IsDirectory { .. }), "{e}");
    assert!(e.to_string().contains(&dir.path().display().to_string()));
    let e = SafeOutput::create(&dir.path().join("no/such/out.bin"), &[]).unwrap_err();
    assert!(matches!(e, OutputError::NoDirectory { .. }), "{e}");
    assert_eq!(names(dir.path()), Vec::<String>::new());
}

#[cfg(unix)]
#[test]
fn refuses_input_by_any_name() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.gguf");
    std::fs::write(&input, b"precious").unwrap();
    let hard = dir.path().join("hard.gguf");
    std::fs::hard_link(&input, &hard).unwrap();
    let soft = dir.path().join("soft.gguf");
    std::os::unix::fs::symlink(&input, &soft).unwrap();
    let dotted = dir.path().join(".").join("in.gguf");
    for target in [&input, &hard, &soft, &dotted] {
        let e = SafeOutput::create(target, &[&input]).unwrap_err();
        assert!(matches!(e, OutputError::SameAsInput { .. }), "{e}");
    }
    // The input given through a link is recognised too.
    let e = SafeOutput::create(&input, &[&soft]).unwrap_err();
    assert!(matches!(e, OutputError::SameAsInput { .. }), "{e}");
    assert_eq!(std::fs::read(&input).unwrap(), b"precious");
    assert_eq!(names(dir.path()), ["hard.gguf", "in.gguf", "soft.gguf"]);
}

#[cfg(unix)]
#[test]
fn symlink_target_replaces_the_file_it_points_at() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real.npy");
    std::fs::write(&real, b"old").unwrap();
    let link = dir.path().join("link.npy");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let mut out = SafeOutput::create(&link, &[]).unwrap();
    out.file().write_all(b"new").unwrap();
    out.commit().unwrap();
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&real).unwrap(), b"new");
}

#[cfg(unix)]
#[test]
fn refuses_devices_fifos_and_dangling_links() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    // Through a link, so that even a broken implementation could only replace the link.
    let dev = dir.path().join("full");
    std::os::unix::fs::symlink("/dev/full", &dev).unwrap();
    let e = SafeOutput::create(&dev, &[]).unwrap_err();
    assert!(
        matches!(
            e,
            OutputError::NotRegularFile {
                kind: "a character device",
                ..
            }
        ),
        "{e}"
    );
    assert!(std::fs::metadata("/dev/full")
        .unwrap()
        .file_type()
        .is_char_device());

    let fifo = dir.path().join("fifo");
    let ok = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        let e = SafeOutput::create(&fifo, &[]).unwrap_err();
        assert!(
            matches!(e, OutputError::NotRegularFile { kind: "a FIFO", .. }),
            "{e}"
        );
    }

    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("nothing"), &dangling).unwrap();
    let e = SafeOutput::create(&dangling, &[]).unwrap_err();
    assert!(matches!(e, OutputError::NotRegularFile { .. }), "{e}");
}

#[test]
fn temp_name_never_collides_with_an_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("out.bin");
    // Occupy the first candidate name: creation must move on, not truncate it.
    let first = dir
        .path()
        .join(format!(".out.bin.glint-tmp-{}-0", std::process::id()));
    std::fs::write(&first, b"someone else's").unwrap();
    let out = SafeOutput::create(&target, &[]).unwrap();
    assert_ne!(out.temp_path(), first);
    drop(out);
    assert_eq!(std::fs::read(&first).unwrap(), b"someone else's");
}

#[cfg(unix)]
#[test]
fn replacing_a_file_keeps_its_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("private.npy");
    std::fs::write(&target, b"old").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut out = SafeOutput::create(&target, &[]).unwrap();
    out.file().write_all(b"new").unwrap();
    out.commit().unwrap();
    let mode = std::fs::metadata(&target).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}
