//! `demo-renderer`: see `--help`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let flags = match demo_renderer::cli::Flags::parse(std::env::args().skip(1)) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if flags.help {
        print!("{}", demo_renderer::cli::USAGE);
        return ExitCode::SUCCESS;
    }
    // The window's loop and the headless run share the app's pieces; the
    // binary picks one (a device list is the app's, window or not).
    let run = if flags.window && !flags.list_devices {
        demo_renderer::window::run(&flags)
    } else {
        demo_renderer::app::run(&flags)
    };
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
