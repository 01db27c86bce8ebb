//! Draft trees: several candidate continuations verified in one forward (SpecInfer, Miao et
//! al. 2024; Medusa's tree attention, Cai et al. 2024). Row 0 is the fed token and row `i > 0`
//! follows row `parents[i] < i`, so every row's ancestors come before it. The cache stores
//! row `i` at position `pos + i`, but the row is computed as if at `pos + depth(i)` after
//! exactly its ancestors: attention puts the row's branch in place for it (see
//! `blocks::attention`), and the engine moves the accepted branch into place afterwards.
//! A chain (`parents[i] = i - 1`) is the tree every plain draft is.

/// Why a tree cannot go through a forward.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error("a draft tree of {parents} parents for {rows} rows")]
    Rows { parents: usize, rows: usize },
    #[error("draft tree row {row} follows row {parent}, which does not come before it")]
    Order { row: usize, parent: usize },
}

/// A draft tree's shape over the rows of one forward (see the module header).
#[derive(Debug, Clone, Copy)]
pub struct Tree<'a> {
    /// Each row's parent; empty for a chain.
    parents: &'a [usize],
    rows: usize,
}

impl<'a> Tree<'a> {
    /// The tree whose row `i > 0` follows `parents[i]` (`parents[0]`, the root's, is not
    /// read); every parent must come before its row.
    pub fn new(parents: &'a [usize]) -> Result<Tree<'a>, TreeError> {
        if let Some((row, &parent)) = parents.iter().enumerate().skip(1).find(|(i, p)| *p >= i) {
            return Err(TreeError::Order { row, parent });
        }
        Ok(Tree {
            parents,
            rows: parents.len(),
        })
    }

    /// `rows` rows, each following the one before.
    pub fn chain(rows: usize) -> Tree<'static> {
        Tree { parents: &[], rows }
    }

    /// Checks that the tree has one row per fed token.
    pub fn fits(&self, rows: usize) -> Result<(), TreeError> {
        match self.rows == rows {
            true => Ok(()),
            false => Err(TreeError::Rows {
                parents: self.rows,
                rows,
            }),
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The row row `i > 0` follows.
    pub fn parent(&self, i: usize) -> usize {
        match self.parents.is_empty() {
            true => i - 1,
            false => self.parents[i],
        }
    }

    /// Ancestors of row `i` below the root.
    pub fn depth(&self, mut i: usize) -> usize {
        if self.parents.is_empty() {
            return i;
        }
        let mut d = 0;
        while i > 0 {
            i = self.parents[i];
            d += 1;
        }
        d
    }

    /// How many leading rows form a chain from the root (each follows the one before): they
    /// sit where their positions belong.
    pub fn spine(&self) -> usize {
        (1..self.rows)
            .find(|&i| self.parent(i) != i - 1)
            .unwrap_or(self.rows)
    }

    /// The rows from the root's child down to row `i` (empty for the root), in order, into
    /// `out`.
    pub fn path(&self, mut i: usize, out: &mut Vec<usize>) {
        out.clear();
        while i > 0 {
            out.push(i);
            i = self.parent(i);
        }
        out.reverse();
    }

    /// The row following row `at` whose token is `token`, if any (`tokens`: each row's).
    pub fn child(&self, at: usize, token: usize, tokens: &[usize]) -> Option<usize> {
        (at + 1..self.rows).find(|&c| self.parent(c) == at && tokens[c] == token)
    }
}

/// Moves a branch into place: for each `j`, the row at `base + 1 + j` and the one at
/// `base + path[j]` exchange places through `swap` (ascending; each path row is at or past
/// its place, and ancestors come first, so no swap disturbs a row already placed). Undone by
/// the same swaps in reverse order.
pub fn place_branch(base: usize, path: &[usize], mut swap: impl FnMut(usize, usize)) {
    for (j, &row) in path.iter().enumerate() {
        if row != j + 1 {
            swap(base + 1 + j, base + row);
        }
    }
}

/// Undoes [`place_branch`].
pub fn unplace_branch(base: usize, path: &[usize], mut swap: impl FnMut(usize, usize)) {
    for (j, &row) in path.iter().enumerate().rev() {
        if row != j + 1 {
            swap(base + 1 + j, base + row);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_knows_its_rows() {
        // 0 → 1 → 2 → 3, 0 → 4, 1 → 5, 4 → 6.
        let parents = [0, 0, 1, 2, 0, 1, 4];
        let t = Tree::new(&parents).unwrap();
        assert_eq!(t.spine(), 4);
        assert_eq!(
            (0..7).map(|i| t.depth(i)).collect::<Vec<_>>(),
            [0, 1, 2, 3, 1, 2, 2]
        );
        let mut p = Vec::new();
        t.path(6, &mut p);
        assert_eq!(p, [4, 6]);
        let tokens = [9, 10, 11, 12, 20, 21, 22];
        assert_eq!(t.child(0, 20, &tokens), Some(4));
        assert_eq!(t.child(1, 21, &tokens), Some(5));
        assert_eq!(t.child(1, 20, &tokens), None);
        assert_eq!(
            Tree::new(&[0, 0, 2]).unwrap_err(),
            TreeError::Order { row: 2, parent: 2 }
        );
        assert!(t.fits(6).is_err() && t.fits(7).is_ok());
        let c = Tree::chain(4);
        assert_eq!((c.spine(), c.depth(3), c.parent(2)), (4, 3, 1));
        assert_eq!(c.child(1, 11, &tokens), Some(2));
        assert_eq!(c.child(1, 13, &tokens), None);
    }

    /// Every branch placed by swaps reads, from the root on, exactly its rows in order, and
    /// undoing the swaps restores the layout.
    #[test]
    fn placing_a_branch_puts_its_rows_in_order() {
        let parents = [0, 0, 1, 2, 0, 4, 1, 6, 6, 3];
        let t = Tree::new(&parents).unwrap();
        let mut path = Vec::new();
        for leaf in 0..parents.len() {
            let mut slots: Vec<usize> = (0..parents.len()).collect();
            t.path(leaf, &mut path);
            place_branch(0, &path, |a, b| slots.swap(a, b));
            assert_eq!(&slots[1..=path.len()], &path[..], "row {leaf}");
            unplace_branch(0, &path, |a, b| slots.swap(a, b));
            assert_eq!(slots, (0..parents.len()).collect::<Vec<_>>());
        }
    }
}
