//! The storage node's gRPC service, generated from `proto/storage.proto`
//! (protoc: Debian's protobuf-compiler, which `.ci/run` installs, as
//! etcd-client's build needs it too).

fn main() {
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        // Read bytes travel as `Bytes`: a node's pooled read buffer goes
        // to the socket without a copy.
        .bytes(".rondo.storage.v1.Piece.data")
        .compile_protos(&["proto/storage.proto"], &["proto"])
        .expect("compiling proto/storage.proto");
}
