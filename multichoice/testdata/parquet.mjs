// Writes the Parquet twins of the hand-written JSON-lines files here with
// an independent writer (the Rust parquet crate of Apache Arrow, as the
// npm package parquet-wasm), in the column types of the Hugging Face
// datasets' Parquet files: HellaSwag's endings a list of strings and its
// label a string, PIQA's label an int64, ARC's choices a struct of two
// lists of strings. Run from a directory where apache-arrow and
// parquet-wasm are installed:
//
//	node parquet.mjs DIR   (DIR: this testdata directory)
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as arrow from "apache-arrow";
import * as pq from "parquet-wasm";

const dir = process.argv[2];
const read = (name) =>
  readFileSync(join(dir, name), "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l));
const strings = () => new arrow.List(new arrow.Field("item", new arrow.Utf8(), true));

function write(name, rows, columns) {
  const vectors = {};
  for (const [col, type, get] of columns) vectors[col] = arrow.vectorFromArray(rows.map(get), type);
  const table = new arrow.Table(vectors);
  const wasm = pq.Table.fromIPCStream(arrow.tableToIPC(table, "stream"));
  const props = new pq.WriterPropertiesBuilder().setCompression(pq.Compression.SNAPPY).build();
  writeFileSync(join(dir, name), pq.writeParquet(wasm, props));
}

write("hellaswag.parquet", read("hellaswag.jsonl"), [
  ["ind", new arrow.Int64(), (r) => BigInt(r.ind)],
  ["activity_label", new arrow.Utf8(), (r) => r.activity_label],
  ["ctx_a", new arrow.Utf8(), (r) => r.ctx_a],
  ["ctx_b", new arrow.Utf8(), (r) => r.ctx_b],
  ["ctx", new arrow.Utf8(), (r) => r.ctx],
  ["endings", strings(), (r) => r.endings],
  ["source_id", new arrow.Utf8(), (r) => r.source_id],
  ["split", new arrow.Utf8(), (r) => r.split],
  ["split_type", new arrow.Utf8(), (r) => r.split_type],
  ["label", new arrow.Utf8(), (r) => r.label],
]);
write("piqa.parquet", read("piqa.jsonl"), [
  ["goal", new arrow.Utf8(), (r) => r.goal],
  ["sol1", new arrow.Utf8(), (r) => r.sol1],
  ["sol2", new arrow.Utf8(), (r) => r.sol2],
  ["label", new arrow.Int64(), (r) => BigInt(r.label)],
]);
write("arc.parquet", read("arc.jsonl"), [
  ["id", new arrow.Utf8(), (r) => r.id],
  ["question", new arrow.Utf8(), (r) => r.question],
  [
    "choices",
    new arrow.Struct([new arrow.Field("text", strings(), true), new arrow.Field("label", strings(), true)]),
    (r) => r.choices,
  ],
  ["answerKey", new arrow.Utf8(), (r) => r.answerKey],
]);
