"""LRA: ListOps, Text (IMDb), Retrieval (AAN and its offline stand-in), Image,
Pathfinder and Path-X: generators, official-format readers and their cache."""
