"""The services' side of the line's PLC over OPC UA (the optional extra ``qcllp[opcua]``,
asyncua): a scorer's flag writer (:mod:`.flag_writer`), the session with the PLC
(:mod:`.link`), the hand-over of one flag, by the write handshake or a method call
(:mod:`.handshake`), and a flag typed as the PLC's variables declare (:mod:`.records`)."""
