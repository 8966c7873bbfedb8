"""Spark schemas: the raw entry schema, and typed columns derived from a pydantic model."""

from __future__ import annotations

import datetime as dt
import decimal
import types
import typing
from typing import Any

from pydantic import BaseModel

from ..errors import ConfigError

# ver: the entry's schema version (1 when it has no ver field, null when it is not one)
ENTRY_SCHEMA = (
    "id string, type string, data string, meta map<string,string>, published_at timestamp, ver int"
)
# a partitioned topic's rows also say their partition (a plain stream's schema is unchanged)
PARTITIONED_ENTRY_SCHEMA = ENTRY_SCHEMA + ", partition int"
# a topic with priorities: the partition and the level (0 the highest) of each row's stream
LEVELLED_ENTRY_SCHEMA = PARTITIONED_ENTRY_SCHEMA + ", priority int"


def spark_type(annotation: Any) -> Any:
    """The Spark type for a Python annotation (pydantic field types)."""
    from pyspark.sql import types as T

    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return spark_type(rest[0])
        return T.StringType()
    if origin in (list, set, tuple, frozenset) or annotation in (list, set):
        return T.ArrayType(spark_type(args[0] if args else str))
    if origin is dict:
        return T.MapType(
            spark_type(args[0]) if args else T.StringType(),
            spark_type(args[1]) if args else T.StringType(),
        )
    if origin is typing.Literal:
        return spark_type(type(args[0]))
    simple = {
        str: T.StringType(), int: T.LongType(), float: T.DoubleType(), bool: T.BooleanType(),
        bytes: T.BinaryType(), dt.datetime: T.TimestampType(), dt.date: T.DateType(),
        decimal.Decimal: T.DecimalType(38, 18),
    }  # fmt: skip
    if annotation in simple:
        return simple[annotation]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_struct(annotation)
    return T.StringType()  # anything else travels as its JSON text


def model_struct(model: type[BaseModel]) -> Any:
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField(name, spark_type(field.annotation), nullable=not field.is_required())
            for name, field in model.model_fields.items()
        ]
    )


def typed_schema(model: type[BaseModel], partitioned: bool = False, levelled: bool = False) -> Any:
    """id, type, the model's fields as columns, meta, published_at, ver (and partition, on
    a partitioned topic or one with priorities, and priority on the latter)."""
    from pyspark.sql import types as T

    reserved = {"id", "type", "meta", "published_at", "ver",
                *(["partition"] if partitioned else []),
                *(["priority"] if levelled else [])}  # fmt: skip
    clash = reserved & set(model.model_fields)
    if clash:
        raise ConfigError(f"model {model.__name__} has fields named like entry columns: {clash}")
    fields = [
        T.StructField("id", T.StringType(), False),
        T.StructField("type", T.StringType(), True),
    ]
    fields.extend(model_struct(model).fields)
    fields.append(T.StructField("meta", T.MapType(T.StringType(), T.StringType()), True))
    fields.append(T.StructField("published_at", T.TimestampType(), True))
    fields.append(T.StructField("ver", T.IntegerType(), True))
    if partitioned:
        fields.append(T.StructField("partition", T.IntegerType(), False))
    if levelled:
        fields.append(T.StructField("priority", T.IntegerType(), False))
    return T.StructType(fields)
