//! The regular expressions of KIP-848 subscriptions (`SubscribedTopicRegex`).
//!
//! Kafka compiles them with RE2J; the `regex` crate speaks RE2's syntax and, like RE2,
//! matches in time linear in the topic name, whatever the pattern. A whole topic name must
//! match, as RE2J's `matches()` asks: the pattern is anchored as `^(?:…)$`. Patterns are
//! bounded in length and in compiled size, so a hostile one is refused rather than grown.

/// Longest pattern accepted, in bytes.
pub const PATTERN_BYTES_MAX: usize = 1024;
/// Largest compiled program, in bytes (the `regex` crate's size limit).
const COMPILED_BYTES_MAX: usize = 1 << 20;
/// RE2's bound on counted repetition (`a{1001}` is refused).
const REPEAT_COUNT_MAX: u32 = 1000;

#[derive(Clone, Debug)]
pub struct TopicRegex {
    source: String,
    regex: regex::Regex,
}

impl TopicRegex {
    pub fn new(source: &str) -> Result<TopicRegex, String> {
        if source.len() > PATTERN_BYTES_MAX {
            return Err(format!("longer than {PATTERN_BYTES_MAX} bytes"));
        }
        if let Some(n) = counted_repetitions(source).find(|&n| n > REPEAT_COUNT_MAX) {
            return Err(format!(
                "bad repetition operator: {{{n}}} is over {REPEAT_COUNT_MAX}"
            ));
        }
        let pattern = literal_braces(source);
        refuse_what_re2_refuses(&pattern)?;
        let regex = regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
            .size_limit(COMPILED_BYTES_MAX)
            .build()
            .map_err(|e| match e {
                regex::Error::CompiledTooBig(_) => "too large once compiled".to_string(),
                other => other.to_string(),
            })?;
        Ok(TopicRegex {
            source: source.to_owned(),
            regex,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether all of `text` matches.
    pub fn is_match(&self, text: &str) -> bool {
        self.regex.is_match(text)
    }
}

/// RE2 reads a `{` that does not open a counted repetition (`a{`, `{,3}`) as a literal; the
/// `regex` crate refuses it, so such a brace is escaped first.
fn literal_braces(source: &str) -> String {
    let mut out = String::with_capacity(source.len() + 4);
    let mut escaped = false;
    for (i, c) in source.char_indices() {
        if c == '{' && !escaped && !opens_repetition(&source[i + 1..]) {
            out.push_str("\\{");
        } else {
            out.push(c);
        }
        escaped = c == '\\' && !escaped;
    }
    out
}

/// Whether `rest` (what follows a `{`) is `m}`, `m,}` or `m,n}`.
fn opens_repetition(rest: &str) -> bool {
    let Some((inside, _)) = rest.split_once('}') else {
        return false;
    };
    let (min, max) = inside.split_once(',').unwrap_or((inside, "0"));
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    !min.is_empty() && digits(min) && digits(max)
}

/// RE2 refuses a repetition of a repetition (`a**`, `a+*`; `a*?` is a lazy star) and of an
/// empty-width assertion (`^*`) as a "bad" or "missing argument to" repetition operator; the
/// `regex` crate accepts both.
fn refuse_what_re2_refuses(pattern: &str) -> Result<(), String> {
    use regex_syntax::ast::Ast;
    let ast = regex_syntax::ast::parse::Parser::new()
        .parse(pattern)
        .map_err(|e| e.to_string())?;
    let mut stack = vec![&ast];
    while let Some(node) = stack.pop() {
        match node {
            Ast::Repetition(r) => match &*r.ast {
                Ast::Repetition(_) => return Err("bad repetition operator".into()),
                Ast::Assertion(_) => return Err("missing argument to repetition operator".into()),
                inner => stack.push(inner),
            },
            Ast::Group(g) => stack.push(&g.ast),
            Ast::Alternation(a) => stack.extend(a.asts.iter()),
            Ast::Concat(c) => stack.extend(c.asts.iter()),
            _ => {}
        }
    }
    Ok(())
}

/// The counts of the pattern's `{m}`, `{m,}` and `{m,n}` (read loosely: a count that is not
/// one is left to the parser to refuse).
fn counted_repetitions(source: &str) -> impl Iterator<Item = u32> + '_ {
    source.split('{').skip(1).flat_map(|rest| {
        let inside = rest.split('}').next().unwrap_or("");
        inside
            .split(',')
            .filter_map(|n| n.trim().parse::<u64>().ok())
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
            .collect::<Vec<_>>()
    })
}
