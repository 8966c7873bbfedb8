"""register(models=...) checks at register time that the executors can import each model."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

import streamq.spark
from handlers.order_handler import Order
from streamq.errors import ConfigError

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def test_an_importable_model_registers(spark: Any, redis_url: str, stream: str) -> None:
    """Registered, the model types the columns of a read of its type, not naming it."""
    streamq.spark.register(spark, models={"order": Order})
    reader = spark.read.format("streamq").option("url", redis_url).option("stream", stream)
    columns = reader.option("type", "order").load().schema.fieldNames()
    assert set(Order.model_fields) <= set(columns), f"no typed columns of Order: {columns}"


def test_a_model_of_the_main_script_is_refused(spark: Any) -> None:
    model = pydantic.create_model("Order", order_id=(str, ...), __module__="__main__")
    with pytest.raises(ConfigError, match=r"'order'.*__main__:Order.*move it into a module"):
        streamq.spark.register(spark, models={"order": model})


def test_a_model_defined_in_a_function_is_refused(spark: Any) -> None:
    class Local(pydantic.BaseModel):
        x: int

    with pytest.raises(ConfigError, match=r"'local'.*<locals>.*module level"):
        streamq.spark.register(spark, models={"local": Local})


def test_a_model_whose_module_cannot_be_imported_is_refused(spark: Any) -> None:
    model = pydantic.create_model("Ghost", x=(int, ...), __module__="no_such_module_here")
    with pytest.raises(
        ConfigError, match=r"'ghost'.*no_such_module_here:Ghost.*cannot be imported"
    ):
        streamq.spark.register(spark, models={"ghost": model})


def test_a_name_that_imports_another_object_is_refused(spark: Any) -> None:
    # same module and name as the shipped Order, but another class (e.g. redefined)
    impostor = pydantic.create_model("Order", x=(int, ...), __module__=Order.__module__)
    with pytest.raises(ConfigError, match=r"handlers.order_handler:Order.*another object"):
        streamq.spark.register(spark, models={"order": impostor})


def test_a_model_must_be_a_class(spark: Any) -> None:
    with pytest.raises(ConfigError, match=r"'order'.*pydantic model class"):
        streamq.spark.register(spark, models={"order": "handlers.order_handler:Order"})  # type: ignore[dict-item]
