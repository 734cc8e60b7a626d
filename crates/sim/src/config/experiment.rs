//! Experiment files: a base configuration and its `[[run]]`s and `[sweep]`, merged as TOML
//! tables before the schema check (so an error names the run and the file), and `--set`
//! overrides by dotted key.

use super::*;

/// An experiment: the runs one file (or the built-in default) describes.
#[derive(Debug, Clone)]
pub struct Experiment {
    /// The configurations to run, in order.
    pub runs: Vec<SimConfig>,
}

/// Parses a `--set` value: TOML if it parses as a value, else a bare string.
pub fn parse_value(text: &str) -> toml::Value {
    let doc = format!("v = {text}");
    match toml::from_str::<toml::Table>(&doc) {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(text.into())),
        Err(_) => toml::Value::String(text.into()),
    }
}

/// Sets dotted `key` in `table` to `value`, creating tables on the way.
pub(crate) fn set_path(
    table: &mut toml::Table,
    key: &str,
    value: toml::Value,
) -> Result<(), String> {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts
        .pop()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("empty key `{key}`"))?;
    let mut t = table;
    for p in parts {
        let entry = t
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        t = entry
            .as_table_mut()
            .ok_or_else(|| format!("`{key}`: `{p}` is not a table"))?;
    }
    t.insert(last.to_string(), value);
    Ok(())
}

/// Applies `--set key=value` overrides and a `--seed` to an experiment's top-level table.
fn apply_sets(
    table: &mut toml::Table,
    sets: &[String],
    seed: Option<u64>,
) -> Result<(), ConfigError> {
    apply_sets_checked(table, sets, seed, |text| {
        toml::from_str::<SimConfig>(text)
            .map(|_| ())
            .map_err(|e| e.message().to_string())
    })
}

/// [`apply_sets`] for a file of another schema: `check` is given each key and its value alone
/// (as TOML) and says what is wrong with it, if anything.
pub(crate) fn apply_sets_checked(
    table: &mut toml::Table,
    sets: &[String],
    seed: Option<u64>,
    check: impl Fn(&str) -> Result<(), String>,
) -> Result<(), ConfigError> {
    for s in sets {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| ConfigError::new("--set", format!("`{s}` is not key=value")))?;
        let (k, v) = (k.trim(), parse_value(v.trim()));
        // The key and its value alone against the schema: a typo is the flag's, not the file's.
        let mut alone = toml::Table::new();
        set_path(&mut alone, k, v.clone()).map_err(|m| ConfigError::new("--set", m))?;
        let text = toml::to_string(&alone).map_err(|e| ConfigError::new("--set", e.to_string()))?;
        if let Err(e) = check(&text) {
            return Err(ConfigError::new("--set", format!("`{k}`: {e}")));
        }
        set_path(table, k, v).map_err(|m| ConfigError::new("--set", m))?;
    }
    if let Some(seed) = seed {
        table.insert("seed".into(), toml::Value::Integer(seed as i64));
    }
    Ok(())
}

/// Merges `over` into `base`, table by table.
fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

fn build(table: &toml::Table, origin: &str, base_dir: &Path) -> Result<SimConfig, ConfigError> {
    let text = toml::to_string(table).map_err(|e| ConfigError::new(origin, e.to_string()))?;
    let mut cfg: SimConfig =
        toml::from_str(&text).map_err(|e| ConfigError::new(origin, e.message().to_string()))?;
    cfg.base_dir = base_dir.to_path_buf();
    cfg.validate().map_err(|m| ConfigError::new(origin, m))?;
    Ok(cfg)
}

/// Loads an experiment from TOML text. `origin` names the file in errors; `sets` are
/// `key=value` overrides applied to the base before the runs' own (`seeds=…` replaces the
/// file's seeds); `seed` overrides every run's seed, and replaces the file's seeds (a sweep
/// of `seed` included) by that one.
pub fn load_experiment(
    text: &str,
    origin: &str,
    base_dir: &Path,
    sets: &[String],
    seed: Option<u64>,
) -> Result<Experiment, ConfigError> {
    // Stage 1: the whole file against the schema, so that errors carry line numbers.
    let mut table: toml::Table =
        toml::from_str(text).map_err(|e| ConfigError::new(origin, e.to_string()))?;
    let runs = match table.remove("run") {
        None => Vec::new(),
        Some(toml::Value::Array(a)) => a,
        Some(_) => {
            return Err(ConfigError::new(
                origin,
                "`run` must be an array of tables ([[run]])",
            ))
        }
    };
    // Scenarios every run is run in (`[[variant]]`: a name and the keys it changes), before
    // the sweep's points.
    let scenario_tables = match table.remove("variant") {
        None => Vec::new(),
        Some(toml::Value::Array(a)) => a,
        Some(_) => {
            return Err(ConfigError::new(
                origin,
                "`variant` must be an array of tables ([[variant]])",
            ))
        }
    };
    let mut scenarios: Vec<(String, toml::Table)> = Vec::new();
    for (i, v) in scenario_tables.iter().enumerate() {
        let mut vt = v
            .as_table()
            .cloned()
            .ok_or_else(|| ConfigError::new(origin, format!("variant {} is not a table", i + 1)))?;
        let Some(toml::Value::String(name)) = vt.remove("name") else {
            return Err(ConfigError::new(
                origin,
                format!(
                    "variant {} has no `name` (it labels the scenario in every run's name)",
                    i + 1
                ),
            ));
        };
        scenarios.push((name, vt));
    }
    let sweep = match table.remove("sweep") {
        None => toml::Table::new(),
        Some(toml::Value::Table(t)) => t,
        Some(_) => {
            return Err(ConfigError::new(
                origin,
                "`sweep` must be a table ([sweep])",
            ))
        }
    };
    // `--set seeds=…` replaces the file's seeds (the key is the experiment's, not a run's).
    let mut run_sets = Vec::with_capacity(sets.len());
    for s in sets {
        match s.split_once('=') {
            Some((k, v)) if k.trim() == "seeds" => {
                table.insert("seeds".into(), parse_value(v.trim()));
            }
            _ => run_sets.push(s.clone()),
        }
    }
    let sets = &run_sets[..];
    let seeds = take_seeds(&mut table, &sweep, origin)?;
    let base_text = toml::to_string(&table).map_err(|e| ConfigError::new(origin, e.to_string()))?;
    let checked = if seeds.is_empty() {
        text_for_schema(text, &base_text)
    } else {
        &base_text
    };
    if let Err(e) = toml::from_str::<SimConfig>(checked) {
        return Err(ConfigError::new(origin, e.to_string()));
    }
    apply_sets(&mut table, sets, seed)?;
    if let (None, [only]) = (seed, &seeds[..]) {
        // One seed: the base's, which a run may still override; names stay as they are.
        table.insert("seed".into(), toml::Value::Integer(*only as i64));
    }
    // Stage 2: every run (and sweep point), merged and validated.
    let mut variants: Vec<(String, toml::Table)> = Vec::new();
    if runs.is_empty() {
        variants.push((String::new(), table.clone()));
    }
    for (i, r) in runs.iter().enumerate() {
        let Some(rt) = r.as_table() else {
            return Err(ConfigError::new(
                origin,
                format!("run {} is not a table", i + 1),
            ));
        };
        if rt.is_empty() {
            return Err(ConfigError::new(
                origin,
                format!(
                    "run {} is empty: a [[run]] names what differs from the base (at least `name`)",
                    i + 1
                ),
            ));
        }
        let mut t = table.clone();
        merge(&mut t, rt);
        if seed.is_some() {
            t.insert("seed".into(), table["seed"].clone());
        }
        let label = rt
            .get("name")
            .and_then(|v| v.as_str())
            .map_or_else(|| format!("run {}", i + 1), |n| format!("run '{n}'"));
        variants.push((label, t));
    }
    let mut out = Vec::new();
    let mut sweep = sweep;
    if seed.is_some() {
        // `--seed N` replays one seed: the file's seeds give way to it.
        sweep.remove("seed");
    }
    let mut points = sweep_points(&sweep).map_err(|m| ConfigError::new(origin, m))?;
    if seed.is_none() && seeds.len() > 1 {
        points = with_seeds(points, &seeds);
    }
    if scenarios.is_empty() {
        scenarios.push((String::new(), toml::Table::new()));
    }
    for (label, t) in &variants {
        for ((scenario, vt), (suffix, sets)) in scenarios
            .iter()
            .flat_map(|sc| points.iter().map(move |p| (sc, p)))
        {
            let mut t = t.clone();
            merge(&mut t, vt);
            for (k, v) in sets {
                set_path(&mut t, k, v.clone()).map_err(|m| ConfigError::new(origin, m))?;
            }
            // The scenario: the variant and the sweep point; the name gains both.
            let scenario = [scenario.as_str(), suffix.as_str()]
                .iter()
                .filter(|x| !x.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join(" ");
            if !scenario.is_empty() {
                let name = t
                    .get("name")
                    .and_then(|v| v.as_str())
                    .unwrap_or("run")
                    .to_string();
                t.insert(
                    "name".into(),
                    toml::Value::String(format!("{name} {scenario}")),
                );
                t.insert("scenario".into(), toml::Value::String(scenario));
            }
            let o = if label.is_empty() {
                origin.to_string()
            } else {
                format!("{origin}, {label}")
            };
            out.push(build(&t, &o, base_dir)?);
        }
    }
    Ok(Experiment { runs: out })
}

/// The experiment's `seeds` (every run and sweep point is run once per seed; see
/// docs/SIMULATOR.md): a list of seeds, or a count N meaning seeds 1 to N. Taken out of the
/// top-level table before the schema check; empty when the file has none.
fn take_seeds(
    table: &mut toml::Table,
    sweep: &toml::Table,
    origin: &str,
) -> Result<Vec<u64>, ConfigError> {
    let Some(v) = table.remove("seeds") else {
        return Ok(Vec::new());
    };
    let bad = |m: String| ConfigError::new(origin, format!("`seeds`: {m}"));
    if sweep.contains_key("seed") {
        return Err(bad(
            "the file also sweeps `seed`; give the seeds in one place".into(),
        ));
    }
    let seeds: Vec<u64> = match v {
        toml::Value::Integer(n) if (1..=10_000).contains(&n) => (1..=n as u64).collect(),
        toml::Value::Integer(n) => {
            return Err(bad(format!(
                "{n} seeds cannot mean anything (a count from 1 to 10000, or a list)"
            )))
        }
        toml::Value::Array(a) => a
            .iter()
            .map(|x| {
                x.as_integer()
                    .filter(|n| *n >= 0)
                    .map(|n| n as u64)
                    .ok_or_else(|| bad(format!("`{x}` is not a seed (a non-negative integer)")))
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(bad(format!(
                "`{other}` is neither a count nor a list of seeds"
            )))
        }
    };
    if seeds.is_empty() {
        return Err(bad("the list is empty".into()));
    }
    let mut sorted = seeds.clone();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(bad(format!("seed {} is given twice", w[0])));
    }
    Ok(seeds)
}

/// Every sweep point once per seed, the seed last in its label (`load=0.5 seed=2`), so that
/// a run's name ends in its seed and the runs of one seed stay together under each point.
#[allow(clippy::type_complexity)]
fn with_seeds(
    points: Vec<(String, Vec<(String, toml::Value)>)>,
    seeds: &[u64],
) -> Vec<(String, Vec<(String, toml::Value)>)> {
    let mut out = Vec::with_capacity(points.len() * seeds.len());
    for (label, sets) in points {
        for &s in seeds {
            let mut sets = sets.clone();
            sets.push(("seed".into(), toml::Value::Integer(s as i64)));
            let l = if label.is_empty() {
                format!("seed={s}")
            } else {
                format!("{label} seed={s}")
            };
            out.push((l, sets));
        }
    }
    out
}

/// The text to check in stage 1: the original (for its line numbers) when it parses without
/// `[[run]]`/`[sweep]`, else the re-serialized base.
fn text_for_schema<'a>(text: &'a str, base_text: &'a str) -> &'a str {
    let has_extra = text.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with("[[run]]") || l.starts_with("[sweep]") || l.starts_with("[run")
    });
    if has_extra {
        base_text
    } else {
        text
    }
}

/// Every combination of the sweep's values, with a label like `load=0.5 mtu=1024`.
#[allow(clippy::type_complexity)]
fn sweep_points(sweep: &toml::Table) -> Result<Vec<(String, Vec<(String, toml::Value)>)>, String> {
    let mut points: Vec<(String, Vec<(String, toml::Value)>)> = vec![(String::new(), Vec::new())];
    // BTreeMap order (toml::Table is ordered by key without preserve_order): deterministic.
    let ordered: BTreeMap<&String, &toml::Value> = sweep.iter().collect();
    for (k, v) in ordered {
        let vals = v
            .as_array()
            .ok_or_else(|| format!("sweep `{k}` must be a list of values"))?;
        if vals.is_empty() {
            return Err(format!("sweep `{k}` is empty"));
        }
        let short = k.rsplit('.').next().unwrap_or(k);
        let mut next = Vec::new();
        for (label, sets) in &points {
            for val in vals {
                let mut s = sets.clone();
                s.push((k.clone(), val.clone()));
                let l = if label.is_empty() {
                    format!("{short}={val}")
                } else {
                    format!("{label} {short}={val}")
                };
                next.push((l, s));
            }
        }
        points = next;
    }
    Ok(points)
}
