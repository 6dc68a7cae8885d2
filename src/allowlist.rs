//! The repository allowlist, the one rule for every list of them (the top
//! level's `allowed_repos` and `--allowed-repo`, and each provider's own):
//! an entry is `ORG/REPO`, compared exactly and case-sensitively with the
//! event's `"<org>/<repo>"`, or `ORG/*`, which admits every repository
//! whose `org` is exactly ORG. So `octo/*` admits `octo/x`, but neither
//! `octopus/x` (another org that only starts alike) nor `Octo/x` (GitHub
//! logins compare case-insensitively on github.com, the allowlist never
//! does: an entry admits what it spells).
//!
//! ORG may hold slashes where a provider's `org` does (`acme/platform/*`
//! for a GitLab subgroup's projects); it names that org alone, never the
//! subgroups below it.

use std::collections::HashSet;

/// The line that admits every repository of an org, as the start-up
/// warning offers it.
pub const ALLOWLIST_LINE: &str = r#"allowed_repos = ["YOUR-ORG/*"]"#;

/// The org that [`ALLOWLIST_LINE`] and the docs' examples write for the
/// operator's own: an entry of it that was copied and never replaced
/// admits nothing real ([`placeholder_entries`]).
pub const PLACEHOLDER_ORG: &str = "YOUR-ORG";

/// What ends an entry that admits every repository of its org.
pub const EVERY_REPO: &str = "/*";

/// One allowlist: exact `org/repo` entries and whole orgs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    exact: HashSet<String>,
    orgs: HashSet<String>,
}

impl Allowlist {
    /// The allowlist of `entries` (`ORG/REPO` or `ORG/*`, as
    /// [`check_entry`] accepts them).
    pub fn new<I, S>(entries: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut list = Allowlist::default();
        for entry in entries.into_iter().map(Into::into) {
            match entry.strip_suffix(EVERY_REPO) {
                Some(org) if !org.is_empty() => list.orgs.insert(org.to_owned()),
                _ => list.exact.insert(entry),
            };
        }
        list
    }

    /// Whether the repository `repo` of `org` is admitted.
    pub fn admits(&self, org: &str, repo: &str) -> bool {
        self.orgs.contains(org) || self.exact.contains(&format!("{org}/{repo}"))
    }

    /// [`Allowlist::admits`] for a caller that holds `"<org>/<repo>"` already.
    pub fn admits_joined(&self, org: &str, org_repo: &str) -> bool {
        self.orgs.contains(org) || self.exact.contains(org_repo)
    }

    /// Whether some entry could admit a repository of `org` (an org-wide
    /// hook's `ping` names the org alone).
    pub fn admits_some_of(&self, org: &str) -> bool {
        self.orgs.contains(org)
            || self.exact.iter().any(|e| e.strip_prefix(org).is_some_and(|rest| rest.starts_with('/')))
    }

    /// No entry at all: every valid delivery is `blocked`.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.orgs.is_empty()
    }
}

/// What `serve` warns of at start when deliveries would all be `blocked`
/// (a provider sees success, and nothing runs), each with the line to add:
/// the top level when it has no entry and no provider has a list of its
/// own, else each provider left with none. `providers`: each provider's
/// name and whether it has its own list.
pub fn missing_allowlists(top_level: &[String], providers: &[(&str, bool)]) -> Vec<String> {
    if !top_level.is_empty() {
        return Vec::new();
    }
    let unlisted: Vec<&str> = providers.iter().filter(|(_, listed)| !listed).map(|(name, _)| *name).collect();
    if unlisted.len() == providers.len() {
        return vec![format!(
            "no allowed repos configured: every valid delivery will be answered `blocked`. Add this line at the top of the config file: {ALLOWLIST_LINE} (or pass --allowed-repo YOUR-ORG/*, or set IDEMGATE_ALLOWED_REPOS)"
        )];
    }
    unlisted
        .into_iter()
        .map(|name| {
            format!(
                "provider `{name}` has no allowed_repos and there are none at the top level: its valid deliveries will be answered `blocked`. Add this line to its [[provider]] table: {ALLOWLIST_LINE}"
            )
        })
        .collect()
}

/// What `serve` warns of at start for each entry of the top level's list
/// and of each provider's own (`providers`: name and list) whose org is
/// still [`PLACEHOLDER_ORG`]: once per entry and list, naming both. The
/// placeholder is the docs' text, never the operator's, so it may be shown.
pub fn placeholder_entries(top_level: &[String], providers: &[(&str, Option<&[String]>)]) -> Vec<String> {
    let lists = std::iter::once(("allowed_repos".to_owned(), top_level)).chain(
        providers.iter().filter_map(|(name, list)| Some((format!("provider `{name}`'s allowed_repos"), (*list)?))),
    );
    let mut warnings = Vec::new();
    for (list_name, list) in lists {
        let mut seen = HashSet::new();
        for entry in list.iter().filter(|e| e.split_once('/').is_some_and(|(org, _)| org == PLACEHOLDER_ORG)) {
            if seen.insert(entry) {
                warnings.push(format!(
                    "{list_name} still holds the placeholder \"{entry}\", which admits no real repository: replace {PLACEHOLDER_ORG} with your organization or user (the login in your repositories' URLs, compared exactly and case-sensitively), then restart serve"
                ));
            }
        }
    }
    warnings
}

/// Checks one entry: `ORG/REPO` (both parts non-empty, no `*`) or `ORG/*`
/// (ORG non-empty, no `*`); `Err` says what is wrong, never the entry.
pub fn check_entry(entry: &str) -> Result<(), &'static str> {
    const SHAPE: &str = "is not ORG/REPO or ORG/*";
    let (org, repo) = match entry.strip_suffix(EVERY_REPO) {
        Some(org) => (org, None),
        None => entry.rsplit_once('/').map(|(org, repo)| (org, Some(repo))).ok_or(SHAPE)?,
    };
    if org.split('/').any(str::is_empty) || repo == Some("") {
        return Err(SHAPE);
    }
    if org.contains('*') || repo.is_some_and(|r| r.contains('*')) {
        return Err("has a `*` other than a whole REPO (ORG/*)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn org_wildcard_is_exact_and_case_sensitive() {
        let list = Allowlist::new(["octo/*", "acme/web"]);
        assert!(list.admits("octo", "x"));
        assert!(list.admits("octo", "anything-at-all"));
        assert!(!list.admits("octopus", "x"));
        assert!(!list.admits("Octo", "x"));
        assert!(!list.admits("oct", "o/x"));
        assert!(list.admits("acme", "web") && list.admits_joined("acme", "acme/web"));
        assert!(list.admits_joined("octo", "octo/x") && !list.admits_joined("octopus", "octopus/x"));
        assert!(!list.admits("acme", "Web"));
        assert!(!list.admits("acme", "api"));
        assert!(list.admits_some_of("octo") && list.admits_some_of("acme"));
        assert!(!list.admits_some_of("acm") && !list.admits_some_of("Octo"));
    }

    #[test]
    fn nested_orgs_name_that_org_alone() {
        let list = Allowlist::new(["acme/platform/*"]);
        assert!(list.admits("acme/platform", "api"));
        assert!(!list.admits("acme", "platform"));
        assert!(!list.admits("acme/platform/sub", "api"));
    }

    #[test]
    fn missing_allowlists_name_the_line_to_add() {
        let top = missing_allowlists(&[], &[("gh", false)]);
        assert!(top.len() == 1 && top[0].contains("top of the config file") && top[0].contains(ALLOWLIST_LINE));
        assert_eq!(missing_allowlists(&[], &[]).len(), 1);
        let mixed = missing_allowlists(&[], &[("gh", true), ("bare", false)]);
        assert!(mixed.len() == 1 && mixed[0].contains("provider `bare`"), "{mixed:?}");
        assert!(missing_allowlists(&[], &[("gh", true)]).is_empty());
        assert!(missing_allowlists(&["octo/*".into()], &[("gh", false)]).is_empty());
    }

    #[test]
    fn a_placeholder_entry_is_named_once_per_list() {
        assert!(ALLOWLIST_LINE.contains(&format!("\"{PLACEHOLDER_ORG}/*\"")), "the line offered is the one warned of");
        let top: Vec<String> =
            ["YOUR-ORG/*", "octo/*", "YOUR-ORG/*", "YOUR-ORG/api", "YOUR-ORGS/x"].map(String::from).into();
        let own: Vec<String> = vec!["YOUR-ORG/*".into()];
        let w = placeholder_entries(&top, &[("gh", Some(&own)), ("plain", None)]);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].starts_with("allowed_repos still holds the placeholder \"YOUR-ORG/*\""), "{w:?}");
        assert!(w[1].contains("\"YOUR-ORG/api\""), "{w:?}");
        assert!(w[2].starts_with("provider `gh`'s allowed_repos still holds the placeholder \"YOUR-ORG/*\""), "{w:?}");
        assert!(placeholder_entries(&["octo/*".into()], &[]).is_empty());
    }

    #[test]
    fn entries_are_checked() {
        for good in ["a/b", "octo/*", "acme/platform/api", "acme/platform/*"] {
            assert_eq!(check_entry(good), Ok(()), "{good}");
        }
        for bad in ["justone", "/b", "a/", "/*", "*/*", "*/x", "octo/x*", "octo/**", "a//b", "a//*"] {
            assert!(check_entry(bad).is_err(), "{bad}");
        }
    }
}
