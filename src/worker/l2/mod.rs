//! The fleet's L2, from one worker's root context: kept apart because with no L2 configured none
//! of it runs, and the rest of the worker must behave as if it did not exist.

pub mod ask;
pub mod entities;
pub mod feed;
pub mod vet;
pub mod write;
