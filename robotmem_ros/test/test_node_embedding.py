"""The node with the real ONNX embedder: hybrid recall and lazy embedding of perceptions."""

from diagnostic_msgs.msg import DiagnosticArray
from robotmem_msgs.srv import Learn, Recall, SavePerception


def test_real_embedder_hybrid_recall_and_background_embedding(ros, start_node):
    node = start_node(embed_backend='onnx', embed_device='cpu', status_period=0.5)
    status = node.status()
    assert status.embed_backend == 'onnx' and status.embed_device == 'cpu'
    assert status.model_id
    node.call(Learn, 'learn', insight='Grip ceramic cups with 12.5 N of force')
    node.call(Learn, 'learn', insight='The charging dock is next to the kitchen door')
    saved = node.call(SavePerception, 'save_perception', description='a red mug on the table',
                      perception_type='vision')
    assert saved.success, saved.error

    def embedded(array):
        for s in array.status:
            if s.name == 'robotmem: embedder' and s.hardware_id == str(node.db_path):
                values = {kv.key: kv.value for kv in s.values}
                return s.level == s.OK and values['pending_embeddings'] == '0'
        return False

    ros.wait_for(DiagnosticArray, '/diagnostics', embedded)  # perception embedded lazily
    found = node.call(Recall, 'recall', query='how hard to hold a coffee mug', min_confidence=0.0)
    assert found.success and found.error == '' and found.mode == 'hybrid'
    assert 'Grip ceramic cups with 12.5 N of force' in [m.content for m in found.memories]
