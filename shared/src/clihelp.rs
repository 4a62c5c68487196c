//! What a command line's `--help` must say: every command and every option
//! or argument a user can give has its own text. Both programs' tests walk
//! their whole command tree with [`without_help`], and make their page of
//! `docs/reference/` from it with [`reference_page`].

use crate::docpage;

/// Columns the reference pages' help is laid out in, whatever the
/// terminal of whoever made them.
pub const HELP_WIDTH: usize = 100;

/// The commands and arguments of `cmd` (and of its subcommands, at any
/// depth) that `--help` shows without a text of their own, each named by
/// its path (`beebot-server round cancel`, `beebot-server round cancel
/// <id>`). Hidden ones, and clap's own `help` and `version`, are left out.
pub fn without_help(cmd: &clap::Command) -> Vec<String> {
    let mut missing = Vec::new();
    walk(cmd, "", &mut missing);
    missing
}

fn walk(cmd: &clap::Command, parent: &str, missing: &mut Vec<String>) {
    let path = if parent.is_empty() {
        cmd.get_name().to_string()
    } else {
        format!("{parent} {}", cmd.get_name())
    };
    if cmd.get_about().is_none() && cmd.get_long_about().is_none() {
        missing.push(path.clone());
    }
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if arg.is_hide_set() || id == "help" || id == "version" {
            continue;
        }
        if arg.get_help().is_none() && arg.get_long_help().is_none() {
            let shown = match arg.get_long() {
                Some(long) => format!("--{long}"),
                None => format!("<{id}>"),
            };
            missing.push(format!("{path} {shown}"));
        }
    }
    for sub in cmd.get_subcommands() {
        if sub.get_name() != "help" && !sub.is_hide_set() {
            walk(sub, &path, missing);
        }
    }
}

/// The reference page of a program (`docs/reference/NAME.md`): a table of
/// its commands, then each command's `--help` as the program prints it,
/// the program first and then its subcommands depth first. The text is
/// the same wherever it is made: laid out at [`HELP_WIDTH`] columns, without
/// colour, naming environment variables but not their values. `intro` is
/// the page's first paragraph.
pub fn reference_page(cmd: clap::Command, intro: &str) -> Result<String, String> {
    let cmd = fixed(cmd);
    let mut commands = Vec::new();
    commands_of(&cmd, &[], &mut commands);
    let name = cmd.get_name();
    let mut page = format!(
        "# `{name}` commands\n\n{}\n\n{intro}\n\n| command | what it does |\n|---|---|\n",
        docpage::made_from_the_code()
    );
    for (path, about) in &commands {
        let path = path.join(" ");
        let anchor = path.replace(' ', "-");
        page += &format!("| [`{path}`](#{anchor}) | {} |\n", docpage::cell(about));
    }
    for (path, _) in &commands {
        let argv = path.iter().map(String::as_str).chain(["--help"]);
        let help = match cmd.clone().try_get_matches_from(argv) {
            Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => e.render().to_string(),
            Err(e) => return Err(format!("`{} --help`: {e}", path.join(" "))),
            Ok(_) => return Err(format!("`{} --help` printed no help", path.join(" "))),
        };
        let help: Vec<&str> = help.lines().map(str::trim_end).collect();
        page += &format!(
            "\n## `{}`\n\n```text\n{}\n```\n",
            path.join(" "),
            help.join("\n").trim_end()
        );
    }
    Ok(page)
}

/// `cmd` and its subcommands at [`HELP_WIDTH`], environment values hidden.
fn fixed(cmd: clap::Command) -> clap::Command {
    cmd.term_width(HELP_WIDTH)
        .mut_args(|a| a.hide_env_values(true))
        .mut_subcommands(fixed)
}

/// Every command a user can give under `cmd` (itself first), as its path of
/// names and its one-line text; clap's `help` and hidden commands left out.
fn commands_of(cmd: &clap::Command, parent: &[String], out: &mut Vec<(Vec<String>, String)>) {
    let mut path = parent.to_vec();
    path.push(cmd.get_name().to_string());
    let about = cmd.get_about().map(ToString::to_string).unwrap_or_default();
    out.push((path.clone(), about));
    for sub in cmd.get_subcommands() {
        if sub.get_name() != "help" && !sub.is_hide_set() {
            commands_of(sub, &path, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_or_argument_without_text_is_named_by_its_path() {
        let cmd = clap::Command::new("tool")
            .about("A tool")
            .arg(clap::Arg::new("fine").long("fine").help("Has text"))
            .subcommand(
                clap::Command::new("bare")
                    .arg(clap::Arg::new("id"))
                    .arg(clap::Arg::new("quiet").long("quiet")),
            )
            .subcommand(clap::Command::new("hidden").hide(true));
        assert_eq!(
            without_help(&cmd),
            ["tool bare", "tool bare <id>", "tool bare --quiet"]
        );
    }

    #[test]
    fn the_reference_page_holds_every_commands_help_without_env_values() {
        let cmd = clap::Command::new("tool")
            .about("A tool")
            .arg(
                clap::Arg::new("home")
                    .long("home")
                    .env("BEEBOT_TEST_CLIHELP_HOME")
                    .help("Where | it lives"),
            )
            .subcommand(
                clap::Command::new("run")
                    .about("Run it")
                    .subcommand(clap::Command::new("fast").about("Quickly")),
            )
            .subcommand(clap::Command::new("hidden").hide(true));
        std::env::set_var("BEEBOT_TEST_CLIHELP_HOME", "/secret");
        let page = reference_page(cmd, "Intro.").expect("page");
        std::env::remove_var("BEEBOT_TEST_CLIHELP_HOME");
        assert!(page.starts_with("# `tool` commands\n"), "{page}");
        assert!(
            page.contains("| [`tool run fast`](#tool-run-fast) | Quickly |"),
            "{page}"
        );
        assert!(page.contains("## `tool run fast`\n\n```text\nQuickly\n\nUsage: tool run fast"));
        assert!(page.contains("[env: BEEBOT_TEST_CLIHELP_HOME]"), "{page}");
        assert!(
            !page.contains("/secret") && !page.contains("hidden"),
            "{page}"
        );
    }
}
