//! `vkalloc-heapmap`: a vkalloc JSON dump as a heap-map PNG, or the difference
//! between two dumps. `cargo xtask heapmap` runs it.

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "\
vkalloc-heapmap: draw a vkalloc JSON dump (Allocator::to_json) as a heap map.

USAGE:
  vkalloc-heapmap DUMP.json --out heap.png [--width PIXELS]
  vkalloc-heapmap --diff OLD.json NEW.json --out diff.png [--width PIXELS]
";

fn read(path: &PathBuf) -> Result<vkalloc::Snapshot, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    vkalloc_heapmap::read_dump(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn run(args: Vec<String>) -> Result<(), String> {
    let mut inputs = Vec::new();
    let mut out = None;
    let mut diff = false;
    let mut width = vkalloc_heapmap::DEFAULT_WIDTH;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--out" | "-o" => out = Some(PathBuf::from(it.next().ok_or("--out needs a file")?)),
            "--diff" => diff = true,
            "--width" => {
                width = it
                    .next()
                    .and_then(|w| w.parse().ok())
                    .filter(|w| (64..=16384).contains(w))
                    .ok_or("--width needs a number of pixels in 64..=16384")?
            }
            "--help" | "-h" => {
                print!("{USAGE}");
                return Ok(());
            }
            s if s.starts_with('-') => return Err(format!("unknown flag '{s}'\n{USAGE}")),
            _ => inputs.push(PathBuf::from(a)),
        }
    }
    let out = out.ok_or_else(|| format!("--out is required\n{USAGE}"))?;
    let image = match (diff, inputs.as_slice()) {
        (false, [dump]) => vkalloc_heapmap::render_heap_map(&read(dump)?, width),
        (true, [old, new]) => vkalloc_heapmap::render_diff(&read(old)?, &read(new)?, width),
        _ => {
            return Err(format!(
                "expected one dump, or --diff and two dumps\n{USAGE}"
            ))
        }
    };
    image
        .save(&out)
        .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    println!("{}: {}x{}", out.display(), image.width(), image.height());
    Ok(())
}

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
