//! The fleet wing: the L2 shared by the Envoys, from this worker's root. `ask` asks it before the
//! origin (and says what the root does next), `write` sends stores, releases and purge records,
//! `feed` applies the other Envoys' purges, and `vet` opens what it returns. With no L2
//! configured none of it runs, and the rest of the worker behaves as if it did not exist.

pub mod ask;
pub mod feed;
pub mod vet;
pub mod write;
