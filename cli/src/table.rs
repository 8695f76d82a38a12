//! Aligned text tables for human output: a header row, columns padded to their widest cell,
//! two spaces between columns, no trailing spaces. Scripts use `--json` instead.

#[derive(Debug, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; a short row is padded with empty cells, a long one is a bug.
    pub fn row(&mut self, cells: Vec<String>) {
        assert!(
            cells.len() <= self.headers.len(),
            "row of {} cells in a table of {} columns",
            cells.len(),
            self.headers.len()
        );
        let mut cells = cells;
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let columns = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                line.push_str(cell);
                if i + 1 < columns {
                    let pad = widths[i] - cell.chars().count() + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A list of ids as Kafka's tools print them: `1,2,3`.
pub fn ids(ids: &[i32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell() {
        let mut t = Table::new(&["TOPIC", "PARTITIONS", "RF"]);
        t.row(vec!["orders".into(), "3".into(), "1".into()]);
        t.row(vec!["a-much-longer-name".into(), "12".into(), "3".into()]);
        assert_eq!(
            t.render(),
            "TOPIC               PARTITIONS  RF\n\
             orders              3           1\n\
             a-much-longer-name  12          3\n"
        );
    }

    #[test]
    fn no_trailing_spaces_and_short_rows_pad() {
        let mut t = Table::new(&["A", "B"]);
        t.row(vec!["x".into()]);
        t.row(vec!["ü".into(), "".into()]);
        assert_eq!(t.render(), "A  B\nx\nü\n");
    }

    #[test]
    #[should_panic]
    fn a_long_row_is_a_bug() {
        Table::new(&["A"]).row(vec!["1".into(), "2".into()]);
    }

    #[test]
    fn id_lists() {
        assert_eq!(ids(&[1, 2, 3]), "1,2,3");
        assert_eq!(ids(&[]), "");
    }
}
