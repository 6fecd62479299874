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
    match demo_renderer::app::run(&flags) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
