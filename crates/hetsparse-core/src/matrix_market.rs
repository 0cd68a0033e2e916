//! Matrix Market reading and writing.
