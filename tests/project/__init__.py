"""Tests of the package as a whole: public API, layering, lazy imports, settings, logging, tracing, AsyncAPI, documents, demos, packaging."""
