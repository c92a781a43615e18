//! The recall tools on the PostgreSQL store: `lcm_grep`, `lcm_describe`, `lcm_expand`.
//!
//! They answer what the SQLite store's ([`crate::core::recall`]) answer for the same data: the same
//! hits in the same order, with the same snippets and scores. What is decided above the
//! storage (snippets, role names, hits, their order and paging, the expansion cap) is shared
//! with the SQLite store; what differs is how rows are found:
//!
//! - full text: each row's `terms` is a `tsvector` of exactly the terms SQLite's FTS5 indexes
//!   hold, so `terms @@ 'a' & 'b'` finds the rows FTS5's `"a" "b"` finds. Messages are ranked by
//!   [`crate::core::search`] (shared); summaries by FTS5's own `bm25()`, which
//!   [`crate::core::search::fts5_bm25`] computes from the same counts FTS5 uses (rows, terms, rows
//!   per phrase), so scores agree to the bit. Ties among summaries go to the older one, as in
//!   SQLite's `ORDER BY score` (its sorter keeps rows in the order FTS5 returns them: rowid
//!   ascending).
//! - regex: newest first within the newest `max_scan_rows` messages, every match confirmed by
//!   the same Rust `regex` the SQLite store uses. When the pattern has literal runs every match
//!   must contain ([`required_literals`]), the server first keeps only the rows holding them
//!   (`LIKE`; served by the trigram index for summaries, a filter on the bounded scan for
//!   messages); that filter is necessary, never sufficient, so no
//!   row Rust would match is dropped. `scan_truncated` means what it means on SQLite: the
//!   bound was reached with fewer hits than asked for.
//!
//! Each call reads in one repeatable-read, read-only transaction, so its counts and rows are
//! one snapshot.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::{GenericClient, Transaction};

use super::inspect::{message_row, summary_cols, summary_row, MESSAGE_COLS};
use super::store::PgStore;
use crate::core::codec;
use crate::core::ids::{self, RecordId};
use crate::core::recall::{
    message_hit_of, role_label, snippet, summary_hit_of, Ask, DescribeReport, ExpandReport,
    ExpandedItem, GrepHit, GrepQuery, GrepReads, GrepReport, GrepSort, MessageRecord, RankedHit,
    RecordReads, Scope, SummaryRecord, RELEVANCE_WINDOW,
};
use crate::core::search::{fts5_bm25, Corpus, MAX_TERMS, TERM_WINDOW};
use crate::core::terms::{normalize, words};
use crate::error::{LosslessError, Result};

/// Rows a regex scan reads per page of its portal.
const SCAN_PAGE: i32 = 256;

/// Literal runs shorter than this are not worth a `LIKE` filter (the trigram index needs
/// three characters).
const MIN_LITERAL_CHARS: usize = 3;

/// A `tsquery` of one index term, as it is (already normalized: it is never stemmed again),
/// quoted so nothing in it is query syntax.
fn lexeme(term: &str) -> String {
    let mut out = String::with_capacity(term.len() + 2);
    out.push('\'');
    for ch in term.chars() {
        match ch {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A `LIKE` pattern matching texts that contain `lit`.
fn like_contains(lit: &str) -> String {
    let mut out = String::with_capacity(lit.len() + 2);
    out.push('%');
    for ch in lit.chars() {
        if matches!(ch, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(ch);
    }
    out.push('%');
    out
}

/// Runs of literal text that every match of `pattern` (Rust `regex` syntax, default flags)
/// contains, for a server-side prefilter; an empty list when none is known. Conservative: a
/// construct it does not fully understand ends the current run (or, for constructs that could
/// change the meaning of what follows, such as flag groups or alternation at the top level,
/// gives no run at all). Group contents are never used (a group may be optional), and a
/// character followed by `?`, `*` or `{…}` is dropped from its run.
pub(crate) fn required_literals(pattern: &str) -> Vec<String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut runs: Vec<String> = Vec::new();
    let mut cur = String::new();
    // Whether the last character of `cur` is the atom just read (a quantifier applies to it).
    let mut last_is_atom = false;
    let mut i = 0;
    let end_run = |cur: &mut String, runs: &mut Vec<String>| {
        if !cur.is_empty() {
            runs.push(std::mem::take(cur));
        }
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '|' => return Vec::new(),
            '(' => {
                let Some(close) = group_end(&chars, i) else {
                    return Vec::new();
                };
                // Flags set for the rest of the pattern (`(?i)`, `(?x)`): give up.
                let inner: String = chars[i + 1..close].iter().collect();
                if let Some(flags) = inner.strip_prefix('?') {
                    if flags.chars().all(|f| f.is_ascii_alphabetic() || f == '-') {
                        return Vec::new();
                    }
                }
                end_run(&mut cur, &mut runs);
                last_is_atom = false;
                i = close + 1;
                continue;
            }
            '[' => {
                let Some(close) = class_end(&chars, i) else {
                    return Vec::new();
                };
                end_run(&mut cur, &mut runs);
                last_is_atom = false;
                i = close + 1;
                continue;
            }
            '?' | '*' | '{' | '+' => {
                // The whole chain of quantifiers (`+?`, `+*`, `{2}?`…): the atom is certainly
                // there only when every one of them is `+`.
                let mut only_plus = true;
                while let Some(&q) = chars.get(i) {
                    match q {
                        '+' => i += 1,
                        '?' | '*' => {
                            only_plus = false;
                            i += 1;
                        }
                        '{' => {
                            only_plus = false;
                            match chars[i..].iter().position(|&x| x == '}') {
                                Some(p) => i += p + 1,
                                None => return Vec::new(),
                            }
                        }
                        _ => break,
                    }
                }
                if last_is_atom && !only_plus {
                    cur.pop();
                }
                // What follows a repeated atom need not be next to it.
                end_run(&mut cur, &mut runs);
                last_is_atom = false;
                continue;
            }
            '.' | '^' | '$' | ')' | ']' | '}' => {
                end_run(&mut cur, &mut runs);
                last_is_atom = false;
            }
            '\\' => {
                let Some(&e) = chars.get(i + 1) else {
                    return Vec::new();
                };
                // Escaped meta characters are themselves; anything else (classes,
                // assertions, `\<`, code points, Unicode classes) ends the run, and the
                // escapes with arguments are not parsed at all.
                if "\\.+*?()|[]{}^$#&-~".contains(e) {
                    cur.push(e);
                    last_is_atom = true;
                    i += 2;
                    continue;
                }
                if matches!(e, 'x' | 'u' | 'U' | 'p' | 'P' | '0'..='9') {
                    return Vec::new();
                }
                end_run(&mut cur, &mut runs);
                last_is_atom = false;
                i += 2;
                // `\b{start}` and the like.
                if e == 'b' && chars.get(i) == Some(&'{') {
                    match chars[i..].iter().position(|&x| x == '}') {
                        Some(p) => i += p + 1,
                        None => return Vec::new(),
                    }
                }
                continue;
            }
            c => {
                cur.push(c);
                last_is_atom = true;
            }
        }
        i += 1;
    }
    end_run(&mut cur, &mut runs);
    runs
}

/// The index of the `]` closing the class opened at `open`; `None` for a nested class or an
/// unclosed one (no prefilter then).
fn class_end(chars: &[char], open: usize) -> Option<usize> {
    let mut i = open + 1;
    if chars.get(i) == Some(&'^') {
        i += 1;
    }
    // A `]` first is a literal.
    if chars.get(i) == Some(&']') {
        i += 1;
    }
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '[' => return None,
            ']' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// The index of the `)` closing the group opened at `open` (escapes and classes skipped).
fn group_end(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = open;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '[' => i = class_end(chars, i)? + 1,
            '(' => {
                depth += 1;
                i += 1;
            }
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    None
}

/// A full-text query over summaries: its phrases (one index term each, in the query's order,
/// for FTS5's per-phrase statistics) and the `tsquery` of the rows it matches.
struct SummaryQuery {
    phrases: Vec<String>,
    tsquery: String,
}

impl SummaryQuery {
    /// FTS5's `"a" "b" …`: every phrase.
    fn all(terms: &[String]) -> Option<Self> {
        let tsquery = terms
            .iter()
            .map(|t| lexeme(t))
            .collect::<Vec<_>>()
            .join(" & ");
        (!terms.is_empty()).then(|| Self {
            phrases: terms.to_vec(),
            tsquery,
        })
    }

    /// [`any_term_fts`]'s `w1 OR w2 …`, each word's terms ANDed; a word without a term (FTS5's
    /// `""`) matches nothing and adds nothing to a score.
    fn any(words_: &[String]) -> Option<Self> {
        let mut phrases = Vec::new();
        let mut groups = Vec::new();
        for w in words_ {
            let terms: Vec<String> = words(w).filter_map(normalize).collect();
            if terms.is_empty() {
                continue;
            }
            groups.push(format!(
                "({})",
                terms
                    .iter()
                    .map(|t| lexeme(t))
                    .collect::<Vec<_>>()
                    .join(" & ")
            ));
            phrases.extend(terms);
        }
        (!groups.is_empty()).then(|| Self {
            phrases,
            tsquery: groups.join(" | "),
        })
    }
}

impl PgStore {
    /// Conversation rows a scope covers.
    pub(crate) async fn scope_conv_ids(c: &impl GenericClient, scope: &Scope) -> Result<Vec<i64>> {
        let rows = match scope {
            Scope::Session(k) => {
                c.query(
                    "SELECT id FROM conversations WHERE agent_id = $1 AND session_key = $2 ORDER BY id",
                    &[&k.agent_id, &k.session_key],
                )
                .await?
            }
            Scope::Agent(a) => {
                c.query(
                    "SELECT id FROM conversations WHERE agent_id = $1 ORDER BY id",
                    &[a],
                )
                .await?
            }
            Scope::All => c.query("SELECT id FROM conversations ORDER BY id", &[]).await?,
        };
        rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
    }

    /// `lcm_grep` (see [`crate::sqlite::Db::grep`], whose answers these are).
    pub(crate) async fn grep_history(&self, q: GrepQuery) -> Result<GrepReport> {
        let mut client = self.client().await?;
        let tx = Self::snapshot(&mut client).await?;
        let report = Self::grep_on(&tx, &q).await?;
        tx.commit().await?;
        Ok(report)
    }

    async fn grep_on(tx: &Transaction<'_>, q: &GrepQuery) -> Result<GrepReport> {
        crate::core::recall::grep(&PgReads(tx), q).await
    }

    /// Grep hits for messages `(id, score)`, in that order.
    async fn message_hits(
        tx: &Transaction<'_>,
        scored: &[(i64, Option<f64>)],
        needles: &[String],
    ) -> Result<Vec<RankedHit>> {
        if scored.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = scored.iter().map(|s| s.0).collect();
        let rows = tx
            .query(
                "SELECT id, conv_id, role::bigint, ts, text, skeleton FROM messages WHERE id = ANY($1)",
                &[&ids],
            )
            .await?;
        let mut by_id = HashMap::with_capacity(rows.len());
        for r in &rows {
            let id: i64 = r.try_get(0)?;
            by_id.insert(id, r);
        }
        let mut out = Vec::with_capacity(scored.len());
        for (id, score) in scored {
            let r = by_id.get(id).ok_or_else(|| {
                LosslessError::Corrupt(format!(
                    "message {id} was found by search but is not stored"
                ))
            })?;
            let text: String = r.try_get(4)?;
            let sk: Option<String> = r.try_get(5)?;
            out.push(message_hit_of(
                *id,
                r.try_get(1)?,
                r.try_get(2)?,
                sk.as_deref(),
                r.try_get(3)?,
                &text,
                *score,
                needles,
            ));
        }
        Ok(out)
    }

    /// [`crate::sqlite::Db::ranked_rows`]: `rows`, each holding every one of `terms`, ranked with
    /// document frequencies from the bounded per-term lookups.
    async fn ranked_rows(
        c: &impl GenericClient,
        terms: &[String],
        rows: Vec<i64>,
        convs: &[i64],
        k: usize,
    ) -> Result<Vec<crate::core::search::RankedMessage>> {
        if rows.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let corpus: Corpus = Self::corpus(c, convs).await?;
        let mut idf_sum = 0.0;
        let mut matched = 0;
        for t in terms.iter().take(MAX_TERMS) {
            let df = Self::term_rows(c, t, TERM_WINDOW, convs).await?.len();
            if df > 0 {
                idf_sum += corpus.idf(df as f64);
                matched += 1;
            }
        }
        let pool = rows.len();
        let cands = rows.into_iter().map(|id| (id, idf_sum, matched)).collect();
        Self::finish_ranking(c, &corpus, cands, convs, k, pool).await
    }

    /// Summaries of `convs` matching `sq`, scored by FTS5's `bm25()` (see the module docs):
    /// best first (ties to the older), or newest first; at most `want`.
    async fn summary_fts_hits(
        tx: &Transaction<'_>,
        sq: &SummaryQuery,
        ask: &Ask<'_>,
    ) -> Result<Vec<RankedHit>> {
        let (convs, sort, want, needles) = (ask.convs, ask.sort, ask.want, ask.words);
        // Recency needs only the newest `want`; relevance scores every match in scope.
        let limit: i64 = match sort {
            GrepSort::Recency => want as i64,
            GrepSort::Relevance => i64::MAX,
        };
        let rows = tx
            .query(
                "SELECT s.id, s.conv_id, s.depth::bigint, s.to_ts, s.text, length(s.terms)::bigint,
                        (SELECT array_agg(s.terms @@ p.q::tsquery ORDER BY p.o)
                         FROM unnest($3::text[]) WITH ORDINALITY AS p(q, o))
                 FROM summaries s
                 WHERE s.terms @@ $1::text::tsquery AND s.conv_id = ANY($2)
                 ORDER BY s.id DESC LIMIT $4",
                &[
                    &sq.tsquery,
                    &convs,
                    &sq.phrases.iter().map(|p| lexeme(p)).collect::<Vec<_>>(),
                    &limit,
                ],
            )
            .await?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        // FTS5's statistics are over its whole index: every summary.
        let totals = tx
            .query_one(
                "SELECT count(*), coalesce(sum(length(terms)), 0)::bigint FROM summaries",
                &[],
            )
            .await?;
        let (n_rows, n_tokens): (i64, i64) = (totals.try_get(0)?, totals.try_get(1)?);
        let mut phrase_rows = Vec::with_capacity(sq.phrases.len());
        let mut counted: HashMap<&str, i64> = HashMap::new();
        for p in &sq.phrases {
            let n = match counted.get(p.as_str()) {
                Some(n) => *n,
                None => {
                    let n: i64 = tx
                        .query_one(
                            "SELECT count(*) FROM summaries WHERE terms @@ $1::text::tsquery",
                            &[&lexeme(p)],
                        )
                        .await?
                        .try_get(0)?;
                    counted.insert(p, n);
                    n
                }
            };
            phrase_rows.push(n);
        }
        let mut scored = Vec::with_capacity(rows.len());
        for r in &rows {
            let present: Vec<bool> = r.try_get::<_, Option<Vec<bool>>>(6)?.unwrap_or_default();
            let score = fts5_bm25(n_rows, n_tokens, &phrase_rows, &present, r.try_get(5)?);
            let text: String = r.try_get(4)?;
            let id: i64 = r.try_get(0)?;
            scored.push((
                id,
                summary_hit_of(
                    id,
                    r.try_get(1)?,
                    r.try_get(2)?,
                    r.try_get(3)?,
                    &text,
                    Some(score),
                    needles,
                    None,
                ),
            ));
        }
        if sort == GrepSort::Relevance {
            // Rows came newest first; FTS5 hands them to the sorter oldest first.
            scored.sort_by(|a, b| a.1 .0.total_cmp(&b.1 .0).then(a.0.cmp(&b.0)));
        }
        Ok(scored.into_iter().take(want).map(|s| s.1).collect())
    }

    /// [`crate::sqlite::Db`]'s regex scan: the newest matches of `re` among messages of
    /// `convs`, newest first, at most `want`, reading only the newest `max_scan` messages of
    /// the store (any conversation's count); and whether that bound ended the scan short of
    /// `want` hits. `likes`: `LIKE` patterns every match satisfies (a prefilter).
    async fn regex_scan_messages(
        tx: &Transaction<'_>,
        re: &regex::Regex,
        likes: &[String],
        convs: &[i64],
        want: usize,
        max_scan: i64,
    ) -> Result<(Vec<RankedHit>, bool)> {
        // The oldest message within the bound, and whether any is older.
        let edge = tx
            .query(
                "SELECT id FROM messages ORDER BY id DESC LIMIT 2 OFFSET $1",
                &[&(max_scan - 1)],
            )
            .await?;
        let lowest: i64 = match edge.first() {
            Some(r) => r.try_get(0)?,
            None => i64::MIN,
        };
        let bounded = edge.len() > 1;
        let sql = format!(
            "SELECT id, conv_id, role::bigint, ts, text, CASE WHEN role = {} THEN skeleton END
             FROM messages WHERE conv_id = ANY($1) AND id >= $2{}
             ORDER BY id DESC",
            codec::role::OTHER,
            like_clauses(likes, 3)
        );
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&convs, &lowest];
        for l in likes {
            params.push(l);
        }
        let portal = tx.bind(sql.as_str(), &params).await?;
        let mut found = Vec::new();
        'scan: loop {
            let rows = tx.query_portal(&portal, SCAN_PAGE).await?;
            for r in &rows {
                let text: String = r.try_get(4)?;
                if !re.is_match(&text) {
                    continue;
                }
                let id: i64 = r.try_get(0)?;
                let ts: Option<i64> = r.try_get(3)?;
                let sk: Option<String> = r.try_get(5)?;
                found.push((
                    0.0,
                    ts.unwrap_or(0),
                    GrepHit {
                        id: ids::message_id(id),
                        conversation_id: r.try_get(1)?,
                        role: role_label(r.try_get(2)?, sk.as_deref()),
                        depth: None,
                        ts,
                        snippet: snippet(&text, &[], Some(re)),
                        score: None,
                    },
                ));
                if found.len() >= want {
                    break 'scan;
                }
            }
            if rows.len() < SCAN_PAGE as usize {
                break;
            }
        }
        let short = found.len() < want;
        Ok((found, bounded && short))
    }

    /// Regex matches among the summaries of `convs`, newest first, appended to `hits` until it
    /// holds `want`.
    async fn regex_scan_summaries(
        tx: &Transaction<'_>,
        re: &regex::Regex,
        likes: &[String],
        convs: &[i64],
        want: usize,
        hits: &mut Vec<RankedHit>,
    ) -> Result<()> {
        let sql = format!(
            "SELECT id, conv_id, depth::bigint, to_ts, text FROM summaries WHERE conv_id = ANY($1){} ORDER BY id DESC",
            like_clauses(likes, 2)
        );
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&convs];
        for l in likes {
            params.push(l);
        }
        let portal = tx.bind(sql.as_str(), &params).await?;
        loop {
            let rows = tx.query_portal(&portal, SCAN_PAGE).await?;
            for r in &rows {
                let text: String = r.try_get(4)?;
                if re.is_match(&text) {
                    hits.push(summary_hit_of(
                        r.try_get(0)?,
                        r.try_get(1)?,
                        r.try_get(2)?,
                        r.try_get(3)?,
                        &text,
                        None,
                        &[],
                        Some(re),
                    ));
                    if hits.len() >= want {
                        return Ok(());
                    }
                }
            }
            if rows.len() < SCAN_PAGE as usize {
                return Ok(());
            }
        }
    }

    /// `lcm_describe` (see [`crate::core::recall::describe`]) in one snapshot.
    pub(crate) async fn describe_item(
        &self,
        id: &str,
        agent: Option<&str>,
    ) -> Result<DescribeReport> {
        let mut client = self.client().await?;
        let tx = Self::snapshot(&mut client).await?;
        let out = crate::core::recall::describe(&PgReads(&tx), id, agent).await?;
        tx.commit().await?;
        Ok(out)
    }

    /// `lcm_expand` (see [`crate::core::recall::expand`]) in one snapshot.
    pub(crate) async fn expand_item(
        &self,
        id: &str,
        max_tokens: u64,
        agent: Option<&str>,
    ) -> Result<ExpandReport> {
        let mut client = self.client().await?;
        let tx = Self::snapshot(&mut client).await?;
        let out = crate::core::recall::expand(&PgReads(&tx), id, max_tokens, agent).await?;
        tx.commit().await?;
        Ok(out)
    }
}

impl GrepReads for PgReads<'_, Transaction<'_>> {
    async fn scope(&self, scope: &Scope) -> Result<Vec<i64>> {
        PgStore::scope_conv_ids(self.0, scope).await
    }

    async fn full_text_messages(&self, ask: &Ask<'_>) -> Result<Vec<RankedHit>> {
        let tx = self.0;
        let Some(sq) = SummaryQuery::all(ask.words) else {
            return Ok(Vec::new());
        };
        let scored: Vec<(i64, Option<f64>)> = match ask.sort {
            GrepSort::Recency => {
                let rows = tx
                    .query(
                        "SELECT id FROM messages WHERE terms @@ $1::text::tsquery AND conv_id = ANY($2)
                         ORDER BY id DESC LIMIT $3",
                        &[&sq.tsquery, &ask.convs, &(ask.want as i64)],
                    )
                    .await?;
                rows.iter()
                    .map(|r| Ok((r.try_get(0)?, None)))
                    .collect::<Result<_>>()?
            }
            GrepSort::Relevance => {
                let rows = tx
                    .query(
                        "SELECT id FROM messages WHERE terms @@ $1::text::tsquery ORDER BY id DESC LIMIT $2",
                        &[&sq.tsquery, &(RELEVANCE_WINDOW as i64)],
                    )
                    .await?;
                let ids = rows
                    .iter()
                    .map(|r| Ok(r.try_get(0)?))
                    .collect::<Result<Vec<i64>>>()?;
                PgStore::ranked_rows(tx, ask.words, ids, ask.convs, ask.want)
                    .await?
                    .iter()
                    .map(|r| (r.id, Some(-r.score)))
                    .collect()
            }
        };
        PgStore::message_hits(tx, &scored, ask.words).await
    }

    async fn full_text_summaries(&self, ask: &Ask<'_>) -> Result<Vec<RankedHit>> {
        match SummaryQuery::all(ask.words) {
            Some(sq) => PgStore::summary_fts_hits(self.0, &sq, ask).await,
            None => Ok(Vec::new()),
        }
    }

    async fn any_term_messages(&self, ask: &Ask<'_>) -> Result<Vec<RankedHit>> {
        let grep = crate::core::search::RankFor::Grep;
        let none = HashSet::new();
        let ranked =
            PgStore::ranked_messages(self.0, ask.words, ask.convs, ask.want, &none, grep).await?;
        let scored: Vec<(i64, Option<f64>)> =
            ranked.iter().map(|r| (r.id, Some(-r.score))).collect();
        PgStore::message_hits(self.0, &scored, ask.words).await
    }

    async fn any_term_summaries(&self, ask: &Ask<'_>) -> Result<Vec<RankedHit>> {
        match SummaryQuery::any(ask.words) {
            Some(sq) => PgStore::summary_fts_hits(self.0, &sq, ask).await,
            None => Ok(Vec::new()),
        }
    }

    async fn regex_messages(
        &self,
        re: &regex::Regex,
        ask: &Ask<'_>,
        max_scan: i64,
    ) -> Result<(Vec<RankedHit>, bool)> {
        let likes = likes_of(ask.query);
        PgStore::regex_scan_messages(self.0, re, &likes, ask.convs, ask.want, max_scan).await
    }

    async fn regex_summaries(
        &self,
        re: &regex::Regex,
        ask: &Ask<'_>,
        hits: &mut Vec<RankedHit>,
    ) -> Result<()> {
        let likes = likes_of(ask.query);
        PgStore::regex_scan_summaries(self.0, re, &likes, ask.convs, ask.want, hits).await
    }
}

/// The `LIKE` prefilters of a regex scan: the literal runs every match holds, long enough to
/// narrow the trigram index's candidates.
fn likes_of(pattern: &str) -> Vec<String> {
    required_literals(pattern)
        .into_iter()
        .filter(|l| l.chars().count() >= MIN_LITERAL_CHARS)
        .map(|l| like_contains(&l))
        .collect()
}

/// The reads of describe and expand over one transaction.
struct PgReads<'a, C>(&'a C);

impl<C: GenericClient + Sync> RecordReads for PgReads<'_, C> {
    async fn summary(&self, id: i64) -> Result<Option<SummaryRecord>> {
        let sql = format!(
            "SELECT {}, s.conv_id, s.text FROM summaries s WHERE s.id = $1",
            summary_cols()
        );
        let Some(r) = self.0.query_opt(&sql, &[&id]).await? else {
            return Ok(None);
        };
        Ok(Some(SummaryRecord {
            row: summary_row(&r)?,
            conv_id: r.try_get(11)?,
            text: r.try_get(12)?,
        }))
    }

    async fn message(&self, id: i64) -> Result<Option<MessageRecord>> {
        let sql = format!(
            "SELECT {MESSAGE_COLS}, m.conv_id, m.tool_call_id FROM messages m WHERE m.id = $1"
        );
        let Some(r) = self.0.query_opt(&sql, &[&id]).await? else {
            return Ok(None);
        };
        Ok(Some(MessageRecord {
            row: message_row(&r)?,
            conv_id: r.try_get(7)?,
            tool_call_id: r.try_get(8)?,
        }))
    }

    async fn conversation_of(&self, id: RecordId) -> Result<Option<i64>> {
        let (sql, id) = match id {
            RecordId::Summary(s) => ("SELECT conv_id FROM summaries WHERE id = $1", s),
            RecordId::Message(m) => ("SELECT conv_id FROM messages WHERE id = $1", m),
        };
        self.0
            .query_opt(sql, &[&id])
            .await?
            .map(|r| Ok(r.try_get(0)?))
            .transpose()
    }

    async fn agent_of(&self, conv_id: i64) -> Result<Option<String>> {
        self.0
            .query_opt(
                "SELECT agent_id FROM conversations WHERE id = $1",
                &[&conv_id],
            )
            .await?
            .map(|r| Ok(r.try_get(0)?))
            .transpose()
    }

    async fn children(&self, id: i64) -> Result<Vec<RecordId>> {
        let rows = self
            .0
            .query(
                "SELECT kind::bigint, child_id FROM summary_children WHERE summary_id = $1 ORDER BY ord",
                &[&id],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let (k, id): (i64, i64) = (r.try_get(0)?, r.try_get(1)?);
                Ok(if k == 0 {
                    RecordId::Message(id)
                } else {
                    RecordId::Summary(id)
                })
            })
            .collect()
    }

    async fn parents(&self, kind: i64, id: i64) -> Result<Vec<String>> {
        // In id order, as SQLite's index returns them.
        let rows = self
            .0
            .query(
                "SELECT summary_id FROM summary_children WHERE kind = $1 AND child_id = $2 ORDER BY summary_id",
                &[&(kind as i16), &id],
            )
            .await?;
        rows.iter()
            .map(|r| Ok(ids::summary_id(r.try_get(0)?)))
            .collect()
    }

    async fn in_frontier(&self, kind: i64, id: i64) -> Result<bool> {
        Ok(self
            .0
            .query_opt(
                "SELECT 1 FROM frontier WHERE kind = $1 AND item_id = $2 LIMIT 1",
                &[&(kind as i16), &id],
            )
            .await?
            .is_some())
    }

    // In two queries, whatever the number of children.
    async fn expanded(&self, children: &[RecordId]) -> Result<Vec<Result<ExpandedItem>>> {
        let c = self.0;
        let (mut mids, mut sids) = (Vec::new(), Vec::new());
        for c in children {
            match c {
                RecordId::Message(m) => mids.push(*m),
                RecordId::Summary(s) => sids.push(*s),
            }
        }
        let mut msgs = HashMap::new();
        if !mids.is_empty() {
            for r in c
                .query(
                    "SELECT id, role::bigint, text, skeleton, ts FROM messages WHERE id = ANY($1)",
                    &[&mids],
                )
                .await?
            {
                let id: i64 = r.try_get(0)?;
                let sk: Option<String> = r.try_get(3)?;
                msgs.insert(
                    id,
                    ExpandedItem {
                        id: ids::message_id(id),
                        role: role_label(r.try_get(1)?, sk.as_deref()),
                        depth: None,
                        ts: r.try_get(4)?,
                        text: r.try_get(2)?,
                    },
                );
            }
        }
        let mut sums = HashMap::new();
        if !sids.is_empty() {
            for r in c
                .query(
                    "SELECT id, depth::bigint, text, to_ts FROM summaries WHERE id = ANY($1)",
                    &[&sids],
                )
                .await?
            {
                let id: i64 = r.try_get(0)?;
                sums.insert(
                    id,
                    ExpandedItem {
                        id: ids::summary_id(id),
                        role: "summary".into(),
                        depth: Some(r.try_get(1)?),
                        ts: r.try_get(3)?,
                        text: r.try_get(2)?,
                    },
                );
            }
        }
        Ok(children
            .iter()
            .map(|c| {
                let item = match c {
                    RecordId::Message(m) => msgs.get(m),
                    RecordId::Summary(s) => sums.get(s),
                };
                item.cloned().ok_or_else(|| {
                    LosslessError::Corrupt(format!("{c} is a child but is not stored"))
                })
            })
            .collect())
    }
}

/// ` AND text LIKE $n …` for each of `likes`, numbered from `first`.
fn like_clauses(likes: &[String], first: usize) -> String {
    (0..likes.len())
        .map(|i| format!(" AND text LIKE ${}", first + i))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_runs_are_what_every_match_holds() {
        for (pattern, runs) in [
            ("deploy", vec!["deploy"]),
            ("src/main\\.rs", vec!["src/main.rs"]),
            ("foo.*bar", vec!["foo", "bar"]),
            ("colou?r", vec!["colo", "r"]),
            ("ab+c", vec!["ab", "c"]),
            ("x{2,3}yz", vec!["yz"]),
            ("a(bc)?def", vec!["a", "def"]),
            ("\\bnd3x0\\b", vec!["nd3x0"]),
            ("[a-z]+ing", vec!["ing"]),
            ("[]x]abc", vec!["abc"]),
            ("e\\d+ warn", vec!["e", " warn"]),
            ("a*?bc", vec!["bc"]),
            ("xb+?c", vec!["x", "c"]),
            ("xb+*c", vec!["x", "c"]),
            ("xb++c", vec!["xb", "c"]),
            ("café \\$5", vec!["café $5"]),
        ] {
            assert_eq!(required_literals(pattern), runs, "{pattern:?}");
        }
        // No safe run: alternation, flags, escapes with arguments, nested classes.
        for pattern in [
            "foo|bar",
            "(?i)deploy",
            "(?x) d e p",
            "\\x41bc",
            "\\p{L}abc",
            "[[:alpha:]]abc",
            "a\\",
        ] {
            assert!(required_literals(pattern).is_empty(), "{pattern:?}");
        }
        // A scoped flag group or a non-capturing one is skipped whole.
        assert_eq!(required_literals("(?i:abc)def"), vec!["def"]);
        assert_eq!(required_literals("(?:x|y)zzz"), vec!["zzz"]);
    }

    #[test]
    fn every_regex_match_holds_its_literal_runs() {
        let texts = [
            "the deploy of src/main.rs failed: colour and color",
            "abbbc café $5 e42 warn",
            "xxyz ADEF adef nd3x0 singing",
            "a]abc foo---bar zzz",
        ];
        for pattern in [
            "deploy",
            "src/main\\.rs",
            "foo.*bar",
            "colou?r",
            "ab+c",
            "x{2,3}yz",
            "a(bc)?def",
            "\\bnd3x0\\b",
            "[a-z]+ing",
            "[]x]abc",
            "e\\d+ warn",
            "café \\$5",
            "(?i:adef)",
        ] {
            let re = regex::Regex::new(pattern).unwrap();
            let runs = required_literals(pattern);
            for t in texts {
                if re.is_match(t) {
                    for r in &runs {
                        assert!(
                            t.contains(r.as_str()),
                            "{pattern:?} matches {t:?} without {r:?}"
                        );
                    }
                }
            }
        }
    }

    /// Random patterns over random texts: whenever the regex matches, the text holds every
    /// literal run (the prefilter never drops a row the regex would match).
    #[test]
    fn the_prefilter_is_sound_on_random_patterns() {
        let pieces = [
            "a", "b", "c", "ab", "ba", "abc", ".", "*", "+", "?", "(a|b)", "[ab]", "[^a]", "\\.",
            "x{2}", "{1,2}", "^", "$", "\\b", "(?:ab)?", "|", "\\d", "1", " ", "(?i)", "a*?",
            "\\$", "[]a]", "(c)+", "é",
        ];
        let alphabet: Vec<char> = "abcx. 1$éAB]".chars().collect();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut checked = 0;
        for _ in 0..4_000 {
            let pattern: String = (0..1 + next(6))
                .map(|_| pieces[next(pieces.len())])
                .collect();
            let Ok(re) = regex::Regex::new(&pattern) else {
                continue;
            };
            let runs = required_literals(&pattern);
            for _ in 0..40 {
                let text: String = (0..next(12))
                    .map(|_| alphabet[next(alphabet.len())])
                    .collect();
                if re.is_match(&text) {
                    checked += 1;
                    for r in &runs {
                        assert!(
                            text.contains(r.as_str()),
                            "{pattern:?} matches {text:?} without {r:?}"
                        );
                    }
                }
            }
        }
        assert!(checked > 1_000, "{checked}");
    }

    #[test]
    fn like_and_lexeme_quote_their_text() {
        assert_eq!(like_contains("50%_a\\b"), "%50\\%\\_a\\\\b%");
        assert_eq!(lexeme("it's"), "'it''s'");
        assert_eq!(
            like_clauses(&["a".into(), "b".into()], 3),
            " AND text LIKE $3 AND text LIKE $4"
        );
    }
}
