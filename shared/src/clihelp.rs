//! What a command line's `--help` must say: every command and every option
//! or argument a user can give has its own text (the reference pages are
//! made from it). Both programs' tests walk their whole command tree with
//! [`without_help`].

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
}
