//! An experiment's JSON: the document `irn sim --json` writes (`{"runs": [...]}`, with
//! `"over_seeds"` when a configuration ran over several seeds), written a run per line, and
//! the slices `--shard I/N` cuts an experiment into, which [`merge`] puts back together in
//! the experiment's order.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;

use irn_sim::metrics::RunSummary;
use serde_json::Value;

/// An experiment's JSON: `{"runs": [...]}`, and when some run was run over several seeds,
/// `"over_seeds"`: each configuration's mean and range over its seeds
/// ([`crate::seeds::SeedGroup`]).
pub fn doc(summaries: &[RunSummary], baseline: Option<&str>) -> Value {
    if crate::seeds::has_seeds(summaries) {
        let groups = crate::seeds::over_seeds(summaries, baseline);
        serde_json::json!({ "runs": summaries, "over_seeds": groups })
    } else {
        serde_json::json!({ "runs": summaries })
    }
}

/// Writes `doc` with one line per run (and per entry of every other list of objects): a
/// run's per-port counters make it hundreds of lines when indented, and an experiment over
/// seeds holds dozens of runs. Any JSON reader reads it alike.
pub fn write_doc(path: &Path, doc: &Value) -> io::Result<()> {
    let mut f = io::BufWriter::new(std::fs::File::create(path)?);
    let Value::Object(map) = doc else {
        serde_json::to_writer(&mut f, doc)?;
        writeln!(f)?;
        return f.flush();
    };
    write!(f, "{{")?;
    for (i, (key, value)) in map.iter().enumerate() {
        write!(
            f,
            "{}\n{}: ",
            if i == 0 { "" } else { "," },
            Value::from(key.as_str())
        )?;
        match value {
            Value::Array(items) if items.iter().all(Value::is_object) => {
                write!(f, "[")?;
                for (j, item) in items.iter().enumerate() {
                    writeln!(f, "{}", if j == 0 { "" } else { "," })?;
                    serde_json::to_writer(&mut f, item)?;
                }
                write!(f, "\n]")?;
            }
            other => serde_json::to_writer(&mut f, other)?,
        }
    }
    writeln!(f, "\n}}")?;
    f.flush()
}

/// What a slice's JSON adds to `{"runs": [...]}`: which slice it is and where its runs go.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct ShardInfo {
    /// Which slice, from 0.
    pub index: usize,
    /// How many slices.
    pub count: usize,
    /// The experiment's runs, all slices together.
    pub runs_total: usize,
    /// Each run's position in the whole experiment.
    pub positions: Vec<usize>,
}

impl ShardInfo {
    /// Slice `index` of `count` of an experiment of `runs_total` runs: runs `index`,
    /// `index + count`, … — disjoint, deterministic slices that cover every run once.
    pub fn new(index: usize, count: usize, runs_total: usize) -> ShardInfo {
        ShardInfo {
            index,
            count,
            runs_total,
            positions: (index..runs_total).step_by(count.max(1)).collect(),
        }
    }
}

/// Why slices cannot be put back together (each names the file).
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// No slice was given.
    #[error("no slices given")]
    Nothing,
    /// A file holds no `shard` object.
    #[error("{0}: no `shard` object (written by `irn sim --shard I/N --json`?)")]
    NotASlice(String),
    /// A file holds no `runs` array.
    #[error("{0}: no `runs` array")]
    NoRuns(String),
    /// Slices of different splits, or of different experiments.
    #[error(
        "{file}: slice {index}/{count} of {total} runs, but the first file is of \
         {first_count}/{first_total} runs: not one split"
    )]
    NotOneSplit {
        /// The file.
        file: String,
        /// Its slice.
        index: usize,
        /// Its split.
        count: usize,
        /// Its experiment's runs.
        total: usize,
        /// The first file's split.
        first_count: usize,
        /// The first file's experiment's runs.
        first_total: usize,
    },
    /// One slice given twice.
    #[error("slice {index} twice: {first} and {second}")]
    Twice {
        /// The slice.
        index: usize,
        /// One file.
        first: String,
        /// The other.
        second: String,
    },
    /// A slice whose runs are not the ones its index and count say.
    #[error(
        "{file}: slice {index}/{count} should hold runs {want:?}, holds {has:?} ({runs} summaries)"
    )]
    WrongRuns {
        /// The file.
        file: String,
        /// Its slice.
        index: usize,
        /// Its split.
        count: usize,
        /// The positions it should hold.
        want: Vec<usize>,
        /// The positions it says it holds.
        has: Vec<usize>,
        /// Summaries it holds.
        runs: usize,
    },
    /// Slices missing.
    #[error("slices {missing:?} of {count} missing")]
    Missing {
        /// Which.
        missing: Vec<usize>,
        /// Of how many.
        count: usize,
    },
}

/// Puts slices (each a file's name and its JSON document) back together: the runs of the
/// whole experiment in its order. Every slice must be there, once, and all of one split.
pub fn merge(slices: Vec<(String, Value)>) -> Result<Vec<Value>, MergeError> {
    let mut total: Option<(usize, usize)> = None;
    let mut seen = BTreeMap::new();
    let mut slots: Vec<Option<Value>> = Vec::new();
    for (file, mut doc) in slices {
        let info: ShardInfo = serde_json::from_value(doc["shard"].take())
            .map_err(|_| MergeError::NotASlice(file.clone()))?;
        match total {
            None => {
                total = Some((info.count, info.runs_total));
                slots = vec![None; info.runs_total];
            }
            Some((first_count, first_total))
                if (first_count, first_total) != (info.count, info.runs_total) =>
            {
                return Err(MergeError::NotOneSplit {
                    file,
                    index: info.index,
                    count: info.count,
                    total: info.runs_total,
                    first_count,
                    first_total,
                })
            }
            Some(_) => {}
        }
        if let Some(first) = seen.insert(info.index, file.clone()) {
            return Err(MergeError::Twice {
                index: info.index,
                first,
                second: file,
            });
        }
        let Some(runs) = doc["runs"].as_array() else {
            return Err(MergeError::NoRuns(file));
        };
        let want = ShardInfo::new(info.index, info.count, info.runs_total).positions;
        if info.positions != want || runs.len() != want.len() {
            return Err(MergeError::WrongRuns {
                file,
                index: info.index,
                count: info.count,
                want,
                has: info.positions,
                runs: runs.len(),
            });
        }
        for (&pos, run) in info.positions.iter().zip(runs) {
            slots[pos] = Some(run.clone());
        }
    }
    let (count, _) = total.ok_or(MergeError::Nothing)?;
    let missing: Vec<usize> = (0..count).filter(|i| !seen.contains_key(i)).collect();
    if !missing.is_empty() {
        return Err(MergeError::Missing { missing, count });
    }
    Ok(slots.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The slices of an experiment of `total` runs named 0, 1, …, cut `count` ways.
    fn slices(total: usize, count: usize) -> Vec<(String, Value)> {
        (0..count)
            .map(|i| {
                let info = ShardInfo::new(i, count, total);
                let runs: Vec<Value> = info
                    .positions
                    .iter()
                    .map(|p| json!({ "name": p }))
                    .collect();
                (format!("s{i}.json"), json!({ "runs": runs, "shard": info }))
            })
            .collect()
    }

    #[test]
    fn slices_in_any_order_give_the_runs_back_in_the_experiments_order() {
        for (total, count) in [(7, 3), (4, 4), (5, 1), (2, 5)] {
            let mut s = slices(total, count);
            s.reverse();
            let runs = merge(s).expect("one whole split");
            let names: Vec<u64> = runs.iter().filter_map(|r| r["name"].as_u64()).collect();
            assert_eq!(
                names,
                (0..total as u64).collect::<Vec<_>>(),
                "{total} in {count}"
            );
        }
    }

    #[test]
    fn a_missing_doubled_foreign_or_altered_slice_is_refused_by_name() {
        let mut s = slices(7, 3);
        s.remove(1);
        assert!(
            matches!(merge(s), Err(MergeError::Missing { missing, count: 3 }) if missing == [1])
        );
        let mut s = slices(7, 3);
        s.push(s[0].clone());
        assert!(matches!(merge(s), Err(MergeError::Twice { index: 0, .. })));
        let mut s = slices(7, 3);
        s.push(slices(8, 3).remove(2));
        assert!(matches!(merge(s), Err(MergeError::NotOneSplit { .. })));
        let mut s = slices(7, 3);
        s[2].1["runs"].as_array_mut().expect("runs").pop();
        assert!(
            matches!(merge(s), Err(MergeError::WrongRuns { ref file, .. }) if file == "s2.json")
        );
        let e = merge(vec![("whole.json".into(), json!({ "runs": [] }))]).expect_err("no shard");
        assert_eq!(
            e.to_string(),
            "whole.json: no `shard` object (written by `irn sim --shard I/N --json`?)"
        );
        assert!(matches!(merge(Vec::new()), Err(MergeError::Nothing)));
    }

    #[test]
    fn a_document_is_a_run_per_line_and_reads_back_the_same() {
        let doc =
            json!({ "runs": [{ "a": 1, "b": [1, 2] }, { "a": 2 }], "over_seeds": [] , "n": 3 });
        let path = std::env::temp_dir().join(format!("irn-report-doc-{}.json", std::process::id()));
        write_doc(&path, &doc).expect("written");
        let text = std::fs::read_to_string(&path).expect("read");
        std::fs::remove_file(&path).ok();
        assert_eq!(
            text,
            "{\n\"runs\": [\n{\"a\":1,\"b\":[1,2]},\n{\"a\":2}\n],\n\"over_seeds\": [\n],\n\"n\": 3\n}\n"
        );
        let back: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(back, doc);
    }
}
