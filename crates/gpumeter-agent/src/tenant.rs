//! The tenant rule: a recording's tenant from the labels the injection library wrote in its
//! header (`GPUMETER_TENANT`, `POD_NAMESPACE`, `POD_NAME`, `POD_UID`, `cgroup`), and the pod UID
//! and container id the cgroup path names (`cgroup_pod_uid`, `cgroup_container_id`:
//! `crate::cgroup`), for pods whose spec does not set the environment. Where the header's
//! `cgroup` names no pod (`/` in a private cgroup namespace), they come from the cgroup of the
//! recording's process as the agent finds it on the host (`crate::hostproc`).
//!
//! A rule is a list of templates tried in order, e.g. `["{GPUMETER_TENANT}",
//! "{POD_NAMESPACE}"]`. A template is text with `{LABEL}` placeholders (`{{` and `}}` for
//! braces); it applies when every label it names is in the header, and gives the text with the
//! labels' values put in. The first template that applies and gives a valid tenant name
//! (`gpumeter_core::TenantName`) is the recording's tenant; when none does, the recording's
//! work is `unattributed` (unless a tenant map names its process or external ids: the map comes
//! first). The default rule is `["{GPUMETER_TENANT}"]`.

use std::collections::BTreeMap;

use gpumeter_core::TenantName;

/// The labels a template may name.
pub const LABELS: [&str; 7] = [
    "GPUMETER_TENANT",
    "POD_NAMESPACE",
    "POD_NAME",
    "POD_UID",
    "cgroup",
    "cgroup_pod_uid",
    "cgroup_container_id",
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Label(String),
}

/// A parsed tenant rule ([module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRule {
    templates: Vec<(String, Vec<Part>)>,
}

impl Default for TenantRule {
    fn default() -> Self {
        TenantRule::parse(&["{GPUMETER_TENANT}".to_string()]).unwrap_or(TenantRule {
            templates: Vec::new(),
        })
    }
}

impl TenantRule {
    /// Parses templates.
    ///
    /// # Errors
    /// A message naming the template: an unclosed `{`, a lone `}`, a label other than
    /// [`LABELS`], an empty template, or no template at all.
    pub fn parse(templates: &[String]) -> Result<TenantRule, String> {
        if templates.is_empty() {
            return Err("the tenant rule has no template".into());
        }
        let mut out = Vec::new();
        for t in templates {
            let parts = parse_template(t)?;
            if parts.is_empty() {
                return Err("an empty tenant template names no tenant".into());
            }
            out.push((t.clone(), parts));
        }
        Ok(TenantRule { templates: out })
    }

    /// The tenant of a recording with `labels`, or `None` (unattributed), with the template
    /// that gave it.
    pub fn tenant(&self, labels: &BTreeMap<String, String>) -> Option<(TenantName, &str)> {
        'templates: for (text, parts) in &self.templates {
            let mut name = String::new();
            for p in parts {
                match p {
                    Part::Text(s) => name.push_str(s),
                    Part::Label(l) => match labels.get(l).filter(|v| !v.is_empty()) {
                        Some(v) => name.push_str(v),
                        None => continue 'templates,
                    },
                }
            }
            if let Ok(t) = TenantName::parse(&name) {
                return Some((t, text));
            }
        }
        None
    }
}

fn parse_template(t: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '{' => {
                let label: String = chars.by_ref().take_while(|&c| c != '}').collect();
                if !LABELS.contains(&label.as_str()) {
                    return Err(format!(
                        "tenant template `{t}`: `{{{label}` is not a label (one of {})",
                        LABELS.join(", ")
                    ));
                }
                if !text.is_empty() {
                    parts.push(Part::Text(std::mem::take(&mut text)));
                }
                parts.push(Part::Label(label));
            }
            '}' => return Err(format!("tenant template `{t}`: a `}}` with no `{{`")),
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_first_template_whose_labels_are_all_set_wins() {
        let rule = TenantRule::parse(&["{GPUMETER_TENANT}".into(), "ns-{POD_NAMESPACE}".into()])
            .expect("rule");
        let l = labels(&[("POD_NAMESPACE", "team-a")]);
        assert_eq!(
            rule.tenant(&l).map(|t| t.0.as_str().to_string()),
            Some("ns-team-a".into())
        );
        let l = labels(&[("POD_NAMESPACE", "team-a"), ("GPUMETER_TENANT", "alice")]);
        assert_eq!(
            rule.tenant(&l).map(|t| t.0.as_str().to_string()),
            Some("alice".into())
        );
        assert_eq!(rule.tenant(&labels(&[("POD_NAME", "p")])), None);
        // An empty value is not set.
        assert_eq!(rule.tenant(&labels(&[("GPUMETER_TENANT", "")])), None);
    }

    #[test]
    fn unknown_labels_and_lone_braces_are_refused() {
        assert!(TenantRule::parse(&["{POD}".into()])
            .expect_err("refused")
            .contains("not a label"));
        assert!(TenantRule::parse(&["a}".into()]).is_err());
        assert!(TenantRule::parse(&[]).is_err());
        assert!(TenantRule::parse(&[String::new()]).is_err());
        let rule = TenantRule::parse(&["{{x}}-{POD_UID}".into()]).expect("escaped braces");
        let l = labels(&[("POD_UID", "u1")]);
        assert_eq!(
            rule.tenant(&l).map(|t| t.0.as_str().to_string()),
            Some("{x}-u1".into())
        );
    }
}
