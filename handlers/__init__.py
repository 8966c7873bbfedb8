"""Example handlers: typed models plus handlers, in decorator and object form."""
