"""The services' side of the line's MQTT broker: the connection (:mod:`.link`), the readings
intake (:mod:`.intake`, ``qcllp serve intake``, with its health and metrics in
:mod:`.intake_health`) and a scorer's flag publisher (:mod:`.flag_publisher`)."""
