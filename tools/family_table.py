#!/usr/bin/env python3
# Prints README.md's table of model families from include/posenc/hf/config.hpp's detail::families
# (tests/test_hf_parity.cpp checks that README lists every entry).
import re
import os, sys
s=open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'include', 'posenc', 'hf', 'config.hpp')).read()
body=s[s.index("inline constexpr family families[] = {"):]
body=body[:body.index("\n};")]
entries=re.findall(r'\{(\.model_type = "[^"]+"[^{}]*)\}', body)
rows=[]
for e in entries:
    f=dict()
    for k,v in re.findall(r'\.(\w+) = ([^,]+?)(?=,\s*\.|\s*$)', e.replace("\n"," ").strip()):
        f[k]=v.strip()
    t=f['model_type'].strip('"')
    lay=f.get('layout','pairing::half_split').split('::')[1]
    layout={'half_split':'half_split','interleaved':'interleaved','rope_interleave':'interleaved (`rope_interleave`: false → half_split)','none':'— (no RoPE: `hf/encoding.hpp`)'}[lay]
    keys=[]
    if 'theta_key' in f: keys.append('`%s` (if no `rope_theta`)'%f['theta_key'].strip('"'))
    if 'partial_key' in f: keys.append('`%s`'%f['partial_key'].strip('"'))
    if 'rope_head_dim_key' in f: keys.append('`%s` (rotary head)'%f['rope_head_dim_key'].strip('"'))
    if 'hidden_key' in f: keys.append('`%s` / `%s`'%(f['hidden_key'].strip('"'),f['heads_key'].strip('"')))
    if 'layers_key' in f: keys.append('`%s`'%f['layers_key'].strip('"'))
    if 'rotary_dim_key' in f: keys.append('`%s`'%f['rotary_dim_key'].strip('"'))
    if 'positions_key' in f: keys.append('`%s`'%f['positions_key'].strip('"'))
    if f.get('mrope')=='true': keys.append('`mrope_section`, `mrope_interleaved`, `vision_config.spatial_merge_size`' + (', `vision_config.tokens_per_second`' if 'tokens_per_second' in f else '') + ', `image_token_id`, `video_token_id`, `vision_start_token_id`')
    if f.get('local_base_freq')=='true': keys.append('`rope_local_base_freq`, `sliding_window_pattern`, `query_pre_attn_scalar`')
    if 'alibi_key' in f: keys.append('`%s` (true: ALiBi)'%f['alibi_key'].strip('"'))
    lr=f.get('layers','layer_rule::full').split('::')[1]
    keys.append({'full':'','sliding_if_window':'`sliding_window`','gemma3_pattern':'','llama4_irope':'`no_rope_layers`, `no_rope_layer_interval`, `attention_chunk_size`, `attn_temperature_tuning`','alternating':'`sliding_window` (layers alternate)','qwen2_window':'`use_sliding_window`, `max_window_layers`, `sliding_window`','smollm3_nope':'`no_rope_layers`, `no_rope_layer_interval` (NoPE layers), `use_sliding_window`, `sliding_window`, `max_window_layers` (ignored, noted)','cohere2_pattern':'`sliding_window_pattern`, `sliding_window` (full layers NoPE)'}[lr])
    if f.get('sinks')=='true': keys.append('learned sinks')
    if f.get('query_pre_attn_scalar')=='true' and f.get('local_base_freq')!='true': keys.append('`query_pre_attn_scalar`')
    keys=[k for k in keys if k]
    d=[]
    num=lambda v: v.replace("'","")
    if 'rope_theta' in f: d.append('rope_theta %s'%num(f['rope_theta']).replace('.0',''))
    if 'max_position_embeddings' in f: d.append('%s %s'%(f.get('positions_key','"max_position_embeddings"').strip('"'), eval(num(f['max_position_embeddings']))))
    if 'original_max_position_embeddings' in f: d.append('original_max_position_embeddings %s'%f['original_max_position_embeddings'])
    if 'head_dim' in f: d.append('head_dim %s'%f['head_dim'])
    if 'rope_head_dim' in f: d.append('qk_rope_head_dim %s'%f['rope_head_dim'])
    if 'hidden_size' in f: d.append('%s %s, %s %s'%(f['hidden_key'].strip('"'),f['hidden_size'],f['heads_key'].strip('"'),f['heads']))
    elif 'heads' in f: d.append('num_attention_heads %s'%f['heads'])
    if 'kv_heads' in f: d.append('num_key_value_heads %s'%f['kv_heads'])
    if 'rotary_dim' in f: d.append('rotary_dim %s'%f['rotary_dim'])
    if 'partial_rotary_factor' in f: d.append('%s %s'%(f.get('partial_key','"partial_rotary_factor"').strip('"'),f['partial_rotary_factor']))
    if 'sliding_window' in f: d.append('sliding_window %s'%f['sliding_window'])
    if 'max_window_layers' in f: d.append('max_window_layers %s'%f['max_window_layers'])
    if 'attn_logit_softcapping' in f: d.append('attn_logit_softcapping %s'%f['attn_logit_softcapping'].replace('.0',''))
    if 'tokens_per_second' in f: d.append('tokens_per_second %s'%f['tokens_per_second'])
    if f.get('heads_rule')=='head_rule::divides': d.append('heads must divide the hidden size')
    if f.get('fixed_rope')=='true': d.append('**base 10000, no scaling: `rope_theta` / `rope_scaling` ignored (noted)**')
    if f.get('legacy_longrope_names')=='true': d.append('`su` / `yarn` = longrope')
    if f.get('checked')!='true' and lay!='none': d.append('*class not checked: `rope_theta` required*')
    rows.append('| `%s` | %s | %s | %s |'%(t,layout,', '.join(keys) or '—',', '.join(d) or '—'))
print('<!-- families table: generated from hf/config.hpp detail::families -->')
print('| `model_type` | layout | keys besides the generic ones | HF config-class defaults posenc applies |')
print('|---|---|---|---|')
print('\n'.join(rows))
print('<!-- families table end -->')
