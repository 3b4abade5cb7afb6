//! `capsule-docgen OUT`: the man pages and shell completions of `capsule`,
//! made from capsule-cli's own parser, laid out as they are installed:
//!
//! - `OUT/man/man1/capsule.1` and one page per subcommand,
//!   `capsule-run.1`, `capsule-layer-list.1`, ... (hidden ones left out),
//!   and `capsule-cli.1`, which names capsule.1 (the same command line);
//! - `OUT/completions/{bash,zsh,fish}/`: for `capsule`, the command users
//!   type, and for `capsule-cli`, which takes the same command line.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap_complete::Shell;

/// The names the command line is typed under.
const BINS: [&str; 2] = ["capsule", "capsule-cli"];

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out] = args.as_slice() else { bail!("usage: capsule-docgen OUT_DIR") };
    let out = Path::new(out);
    let pages = man_pages(&out.join("man/man1"))?;
    let completions = completions(&out.join("completions"))?;
    println!("capsule-docgen: {} man pages, {} completion files in {}", pages.len(), completions.len(), out.display());
    Ok(())
}

fn man_pages(dir: &Path) -> Result<Vec<PathBuf>> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(capsule_cli::cli_of(None), dir)
        .with_context(|| format!("writing to {}", dir.display()))?;
    // man(1) reads a page that is only `.so OTHER` as OTHER.
    fs::write(dir.join("capsule-cli.1"), ".so man1/capsule.1\n")?;
    let mut pages: Vec<PathBuf> = fs::read_dir(dir)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
    pages.sort();
    Ok(pages)
}

fn completions(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let sub = dir.join(shell.to_string());
        fs::create_dir_all(&sub).with_context(|| format!("creating {}", sub.display()))?;
        for bin in BINS {
            // The names each shell looks for: bash `NAME`, zsh `_NAME`, fish `NAME.fish`.
            let name = match shell {
                Shell::Zsh => format!("_{bin}"),
                Shell::Fish => format!("{bin}.fish"),
                _ => bin.to_string(),
            };
            let path = sub.join(name);
            let mut file = fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
            clap_complete::generate(shell, &mut capsule_cli::cli_of(None), bin, &mut file);
            files.push(path);
        }
    }
    Ok(files)
}
